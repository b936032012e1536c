//! Which Terraform command this provider process serves, as far as it can be told.
//!
//! `terraform destroy` (and `plan -destroy`, `apply -destroy`) starts with a *normal* plan
//! that refreshes the state and plans every configured instance, uncreated ones included;
//! any error there aborts the destroy (Terraform's `destroyPlan`, `PreDestroyRefresh`).
//! Nothing in the plugin protocol tells that plan from an ordinary one, so a plan-time
//! refusal of a create that can never happen would block the destroy. The one thing that
//! does tell them apart is the command line of the Terraform (or OpenTofu) process that
//! started this one: go-plugin starts providers as its direct children. Only a command line
//! read as an ordinary `plan` or `apply` lets cluster-state refusals fail a plan; anything
//! else (a destroy, `terraform test`, an unreadable parent, another OS) makes them warnings,
//! and apply checks again before any write.

use std::sync::OnceLock;

/// What the parent command can do to the configured resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    /// A `plan` or `apply` that is not a destroy: a refused create fails the plan.
    PlanOrApply,
    /// A destroy, or a command that may be one (or could not be read): refusals of creates
    /// that may never happen are warnings.
    MaybeDestroy,
}

/// The invocation of this process's parent, read once.
pub fn current() -> Invocation {
    static CURRENT: OnceLock<Invocation> = OnceLock::new();
    *CURRENT.get_or_init(|| match parent_command_line() {
        Some(args) => classify(&args, |name| std::env::var(name).ok()),
        None => Invocation::MaybeDestroy,
    })
}

#[cfg(target_os = "linux")]
fn parent_command_line() -> Option<Vec<String>> {
    let parent = std::os::unix::process::parent_id();
    let raw = std::fs::read(format!("/proc/{parent}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

#[cfg(not(target_os = "linux"))]
fn parent_command_line() -> Option<Vec<String>> {
    None
}

/// Classifies a Terraform/OpenTofu command line (`args[0]` is the program). Options given
/// through `TF_CLI_ARGS` and `TF_CLI_ARGS_<command>` count as if on the command line.
pub fn classify(args: &[String], env: impl Fn(&str) -> Option<String>) -> Invocation {
    let mut rest = args.iter().skip(1).map(String::as_str);
    // Global options (`-chdir=DIR`, `-help`) come before the subcommand.
    let Some(command) = rest.by_ref().find(|arg| !arg.starts_with('-')) else {
        return Invocation::MaybeDestroy;
    };
    if command != "plan" && command != "apply" {
        return Invocation::MaybeDestroy;
    }
    let from_env = options_from_env(command, &env);
    let destroys = rest
        .chain(from_env.iter().map(String::as_str))
        .any(is_destroy_flag);
    if destroys {
        Invocation::MaybeDestroy
    } else {
        Invocation::PlanOrApply
    }
}

/// Whether the parent is, positively, a destroy of the whole configuration: `terraform
/// destroy` or `apply -destroy`, without `-target`. Only such a destroy also removes what
/// this working directory's killed creates left behind (see `lifecycle::orphans`); an
/// unreadable parent is never one.
pub fn full_destroy() -> bool {
    static FULL: OnceLock<bool> = OnceLock::new();
    *FULL.get_or_init(|| {
        parent_command_line()
            .is_some_and(|args| is_full_destroy(&args, |name| std::env::var(name).ok()))
    })
}

/// See [`full_destroy`]; options from `TF_CLI_ARGS` and `TF_CLI_ARGS_<command>` count.
pub fn is_full_destroy(args: &[String], env: impl Fn(&str) -> Option<String>) -> bool {
    let mut rest = args.iter().skip(1).map(String::as_str);
    let Some(command) = rest.by_ref().find(|arg| !arg.starts_with('-')) else {
        return false;
    };
    let from_env = options_from_env(command, &env);
    let options: Vec<&str> = rest.chain(from_env.iter().map(String::as_str)).collect();
    let destroys = command == "destroy"
        || (command == "apply" && options.iter().any(|arg| is_destroy_flag(arg)));
    let targeted = options.iter().any(|arg| {
        let flag = arg.trim_start_matches('-');
        arg.starts_with('-') && (flag == "target" || flag.starts_with("target="))
    });
    destroys && !targeted
}

/// The Terraform process this one serves, told apart from every other run: its PID and
/// start time (a PID reused later is another run). The plan walk and the apply walk of one
/// `terraform apply` are providers started by the same process, so they share it; `None`
/// where the system does not tell (not Linux).
pub fn run_identity() -> Option<&'static str> {
    static IDENTITY: OnceLock<Option<String>> = OnceLock::new();
    IDENTITY.get_or_init(parent_identity).as_deref()
}

#[cfg(target_os = "linux")]
fn parent_identity() -> Option<String> {
    let parent = std::os::unix::process::parent_id();
    let stat = std::fs::read_to_string(format!("/proc/{parent}/stat")).ok()?;
    Some(format!("{parent}@{}", start_time(&stat)?))
}

#[cfg(not(target_os = "linux"))]
fn parent_identity() -> Option<String> {
    None
}

/// A process's start time from its `/proc/PID/stat` line (field 22, counted after the
/// command name, which is in parentheses and may itself hold spaces).
pub fn start_time(stat: &str) -> Option<&str> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields 3 onwards follow the name: field 22 is the 20th of them.
    after_name.split_whitespace().nth(19)
}

/// Whether the parent applies a saved plan (`terraform apply PLANFILE`): that plan, and what
/// it recorded in this directory's journal, came from an earlier Terraform process. An
/// unreadable parent counts as one (records are trusted, as without this check).
pub fn applies_saved_plan() -> bool {
    static SAVED: OnceLock<bool> = OnceLock::new();
    *SAVED.get_or_init(|| parent_command_line().is_none_or(|args| is_saved_plan_apply(&args)))
}

/// `apply`'s options that take their value as the next argument when not written
/// `-option=value` (Terraform's `command/arguments/apply.go` and `extended.go`).
const APPLY_OPTIONS_WITH_VALUES: &[&str] = &[
    "backup",
    "exclude",
    "lock-timeout",
    "parallelism",
    "replace",
    "state",
    "state-out",
    "target",
    "var",
    "var-file",
];

/// See [`applies_saved_plan`]: an `apply` with a positional argument, the plan file.
pub fn is_saved_plan_apply(args: &[String]) -> bool {
    let mut rest = args.iter().skip(1).map(String::as_str);
    if rest.by_ref().find(|arg| !arg.starts_with('-')) != Some("apply") {
        return false;
    }
    while let Some(arg) = rest.next() {
        let Some(flag) = arg.strip_prefix('-') else {
            return true;
        };
        let flag = flag.trim_start_matches('-');
        if !flag.contains('=') && APPLY_OPTIONS_WITH_VALUES.contains(&flag) {
            rest.next();
        }
    }
    false
}

/// The options `TF_CLI_ARGS` and `TF_CLI_ARGS_<command>` add to `command`.
fn options_from_env(command: &str, env: &impl Fn(&str) -> Option<String>) -> Vec<String> {
    ["TF_CLI_ARGS".to_owned(), format!("TF_CLI_ARGS_{command}")]
        .iter()
        .filter_map(|name| env(name))
        .flat_map(|value| {
            value
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn is_destroy_flag(arg: &str) -> bool {
    let flag = arg.trim_start_matches('-');
    // `-destroy`, `--destroy`, `-destroy=true`; `-destroy=false` is an ordinary plan.
    arg.starts_with('-')
        && (flag == "destroy" || (flag.starts_with("destroy=") && flag != "destroy=false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(line: &str) -> Invocation {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        classify(&args, |_| None)
    }

    #[test]
    fn ordinary_plans_and_applies_are_told_apart_from_destroys() {
        assert_eq!(of("terraform plan"), Invocation::PlanOrApply);
        assert_eq!(of("terraform apply -auto-approve"), Invocation::PlanOrApply);
        assert_eq!(
            of("tofu -chdir=infra apply plan.tfplan"),
            Invocation::PlanOrApply
        );
        assert_eq!(of("terraform plan -destroy=false"), Invocation::PlanOrApply);
        assert_eq!(of("terraform destroy"), Invocation::MaybeDestroy);
        assert_eq!(
            of("terraform -chdir=x plan -destroy"),
            Invocation::MaybeDestroy
        );
        assert_eq!(of("terraform apply --destroy"), Invocation::MaybeDestroy);
        assert_eq!(
            of("terraform apply -destroy=true"),
            Invocation::MaybeDestroy
        );
        // `terraform test` destroys what each run made, after a pre-destroy refresh.
        assert_eq!(of("terraform test"), Invocation::MaybeDestroy);
        assert_eq!(of("terraform"), Invocation::MaybeDestroy);
        assert_eq!(of("terraform -chdir=x"), Invocation::MaybeDestroy);
    }

    #[test]
    fn only_a_whole_destroy_is_a_full_destroy() {
        let full = |line: &str| {
            let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            is_full_destroy(&args, |_| None)
        };
        assert!(full("terraform destroy -auto-approve"));
        assert!(full("tofu -chdir=infra destroy"));
        assert!(full("terraform apply -destroy -auto-approve"));
        assert!(!full("terraform destroy -target=proxmox_proxy_vm.a"));
        assert!(!full("terraform destroy -target proxmox_proxy_vm.a"));
        assert!(!full("terraform apply -auto-approve"));
        assert!(!full("terraform plan -destroy"));
        assert!(!full("terraform apply destroy.tfplan"));
        assert!(!full("terraform"));
        let args: Vec<String> = ["terraform", "destroy"].map(str::to_owned).to_vec();
        let env = |name: &str| (name == "TF_CLI_ARGS_destroy").then(|| "-target=x".into());
        assert!(!is_full_destroy(&args, env));
    }

    #[test]
    fn a_saved_plan_apply_is_an_apply_with_a_plan_file() {
        let saved = |line: &str| {
            let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            is_saved_plan_apply(&args)
        };
        assert!(saved("terraform apply plan.tfplan"));
        assert!(saved(
            "tofu -chdir=infra apply -input=false -no-color plan.tfplan"
        ));
        assert!(saved("terraform apply -var x=1 -parallelism 5 saved"));
        assert!(!saved("terraform apply"));
        assert!(!saved("terraform apply -auto-approve -var x=1 -target a.b"));
        assert!(!saved(
            "terraform apply -replace=proxmox_proxy_vm.a -var-file=x.tfvars"
        ));
        assert!(!saved("terraform apply --var-file prod.tfvars"));
        assert!(!saved("terraform plan -out plan.tfplan"));
        assert!(!saved("terraform"));
    }

    #[test]
    fn the_start_time_is_read_past_a_command_name_with_spaces() {
        let stat = "4242 (terraform x) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 12 0 \
                    987654 0 0";
        assert_eq!(start_time(stat), Some("987654"));
        assert_eq!(start_time("4242 (short"), None);
        assert_eq!(start_time("4242 (t) S 1"), None);
    }

    #[test]
    fn this_process_has_an_identity_on_linux() {
        if cfg!(target_os = "linux") {
            let identity = run_identity().unwrap();
            let pid = std::os::unix::process::parent_id().to_string();
            assert!(identity.starts_with(&format!("{pid}@")), "{identity}");
        }
    }

    #[test]
    fn a_destroy_flag_from_the_environment_counts() {
        let args: Vec<String> = ["terraform", "plan"].map(str::to_owned).to_vec();
        let env = |name: &str| (name == "TF_CLI_ARGS_plan").then(|| "-no-color -destroy".into());
        assert_eq!(classify(&args, env), Invocation::MaybeDestroy);
        let env = |name: &str| (name == "TF_CLI_ARGS_apply").then(|| "-destroy".into());
        assert_eq!(classify(&args, env), Invocation::PlanOrApply);
        let env = |name: &str| (name == "TF_CLI_ARGS").then(|| "-destroy".into());
        assert_eq!(classify(&args, env), Invocation::MaybeDestroy);
    }
}
