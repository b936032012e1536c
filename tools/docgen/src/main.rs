//! `docgen`: writes the registry docs (`docs/index.md`, `docs/resources/*.md`,
//! `docs/data-sources/*.md`) from the provider's own schema, as Terraform reports it, and the
//! files under `examples/`. The hand-written pages in `docs/` are left alone.

mod render;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const HELP: &str = "\
docgen: registry docs from `terraform providers schema -json` and examples/

USAGE:
    docgen [OPTIONS] [DOCS_DIR]        (DOCS_DIR defaults to <root>/docs)

OPTIONS:
    --provider-binary PATH   provider to ask for its schema
                             (default <root>/target/release/terraform-provider-proxmox)
    --schema-json FILE       use this saved `terraform providers schema -json` output instead
    --terraform PATH         CLI to run (default $TF_ACC_TERRAFORM_PATH, else `terraform`)
    --root DIR               checkout holding examples/ and templates/ (default: this one)
    --check                  write nothing; list every difference and exit 1 if any
    -h, --help               this text

The provider is installed into a temporary filesystem mirror, so no registry is contacted.
";

const PROVIDER_SOURCE: &str = "proxyvm/proxmox";

struct Args {
    docs_dir: Option<PathBuf>,
    provider_binary: Option<PathBuf>,
    schema_json: Option<PathBuf>,
    terraform: Option<PathBuf>,
    root: PathBuf,
    check: bool,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args {
        docs_dir: None,
        provider_binary: None,
        schema_json: None,
        terraform: None,
        // This checkout; canonical so that the paths printed are readable.
        root: {
            let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
            root.canonicalize().unwrap_or(root)
        },
        check: false,
    };
    let mut raw = std::env::args().skip(1);
    while let Some(arg) = raw.next() {
        let mut value = |name: &str| {
            raw.next()
                .map(PathBuf::from)
                .ok_or(format!("{name} needs a value"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--provider-binary" => args.provider_binary = Some(value(&arg)?),
            "--schema-json" => args.schema_json = Some(value(&arg)?),
            "--terraform" => args.terraform = Some(value(&arg)?),
            "--root" => args.root = value(&arg)?,
            "--check" => args.check = true,
            other if other.starts_with('-') => {
                return Err(format!("unknown option {other} (see --help)"));
            }
            other => args.docs_dir = Some(PathBuf::from(other)),
        }
    }
    Ok(Some(args))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("docgen: {why}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(code) => code,
        Err(why) => {
            eprintln!("docgen: {why}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    let schema_text = match &args.schema_json {
        Some(file) => {
            std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?
        }
        None => {
            let binary = args
                .provider_binary
                .clone()
                .unwrap_or_else(|| args.root.join("target/release/terraform-provider-proxmox"));
            let terraform = args.terraform.clone().unwrap_or_else(|| {
                std::env::var_os("TF_ACC_TERRAFORM_PATH")
                    .map_or_else(|| PathBuf::from("terraform"), PathBuf::from)
            });
            schema_from_terraform(&terraform, &binary)?
        }
    };
    let schema: serde_json::Value =
        serde_json::from_str(&schema_text).map_err(|e| format!("the schema is not JSON: {e}"))?;
    let pages = render::render_all(&schema, PROVIDER_SOURCE, &args.root)?;
    let docs_dir = args
        .docs_dir
        .clone()
        .unwrap_or_else(|| args.root.join("docs"));
    if args.check {
        let problems = render::differences(&pages, &docs_dir);
        if problems.is_empty() {
            println!("docs are up to date ({} pages)", pages.len());
            return Ok(ExitCode::SUCCESS);
        }
        for problem in &problems {
            eprintln!("{problem}");
        }
        eprintln!(
            "the committed docs differ from the generated ones; run scripts/docs.sh and commit \
                docs/"
        );
        return Ok(ExitCode::FAILURE);
    }
    render::write_pages(&pages, &docs_dir)?;
    for page in &pages {
        println!("wrote {}", docs_dir.join(&page.path).display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Installs `binary` into a throwaway filesystem mirror and asks the CLI for the schema,
/// which proves the schema survives the wire encoding exactly as users will see it.
fn schema_from_terraform(terraform: &Path, binary: &Path) -> Result<String, String> {
    if !binary.is_file() {
        return Err(format!(
            "no provider binary at {} (run `cargo build --release` first, or pass \
                --provider-binary)",
            binary.display()
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let version = "0.0.1";
    let platform = platform();
    // Both hosts: `proxyvm/proxmox` means registry.terraform.io to terraform and
    // registry.opentofu.org to tofu.
    let hosts = ["registry.terraform.io", "registry.opentofu.org"];
    for host in hosts {
        let target = dir
            .path()
            .join("mirror")
            .join(host)
            .join(PROVIDER_SOURCE)
            .join(version)
            .join(&platform);
        std::fs::create_dir_all(&target).map_err(|e| format!("{}: {e}", target.display()))?;
        std::fs::copy(
            binary,
            target.join(format!("terraform-provider-proxmox_v{version}")),
        )
        .map_err(|e| format!("copying {}: {e}", binary.display()))?;
    }
    let cli_config = format!(
        "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = \
            [{}]\n  }}\n}}\n",
        dir.path().join("mirror").display(),
        hosts
            .map(|h| format!("\"{h}/{PROVIDER_SOURCE}\""))
            .join(", ")
    );
    std::fs::write(dir.path().join("cli.tfrc"), cli_config)
        .map_err(|e| format!("cli config: {e}"))?;
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("work dir: {e}"))?;
    std::fs::write(
        work.join("main.tf"),
        format!(
            "terraform {{\n  required_providers {{\n    proxmox = {{ source = \
            \"{PROVIDER_SOURCE}\" }}\n  }}\n}}\n"
        ),
    )
    .map_err(|e| format!("main.tf: {e}"))?;

    let run = |args: &[&str]| -> Result<String, String> {
        let output = Command::new(terraform)
            .args(args)
            .current_dir(&work)
            .env("TF_CLI_CONFIG_FILE", dir.path().join("cli.tfrc"))
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env_remove("TF_LOG")
            .output()
            .map_err(|e| format!("cannot run {}: {e}", terraform.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} {} failed:\n{}{}",
                terraform.display(),
                args.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        String::from_utf8(output.stdout).map_err(|e| format!("non-UTF-8 output: {e}"))
    };
    run(&["init", "-input=false", "-no-color", "-backend=false"])?;
    run(&["providers", "schema", "-json"])
}

fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    format!("{}_{arch}", std::env::consts::OS)
}
