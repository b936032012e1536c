fn main() -> std::process::ExitCode {
    terraform_provider_proxmox::run()
}
