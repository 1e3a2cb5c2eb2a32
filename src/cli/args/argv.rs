//! The process arguments as given, before clap reads them: the name the binary runs under
//! (Tumblr's entrypoint, a kubectl plugin), a bare `-v`, an empty environment variable, and
//! `serve --settings FILE`.

use super::{Cli, settings_file};

impl Cli {
    /// Parses the process arguments. An environment variable set to an empty value counts as
    /// unset, as in Tumblr's entrypoint (`TLS_PORT=` falls back to the default).
    pub fn parse_args() -> Self {
        fn unset_if_empty(arg: clap::Arg) -> clap::Arg {
            let empty = arg
                .get_env()
                .and_then(std::env::var_os)
                .is_some_and(|value| value.is_empty());
            if empty { arg.env(None) } else { arg }
        }
        let given: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let mut command = <Self as clap::CommandFactory>::command()
            .mut_args(unset_if_empty)
            .mut_subcommands(|sub| sub.mut_args(unset_if_empty));
        if is_kubectl_plugin(given.first()) {
            // Usage and errors then show what the user typed.
            command = command.bin_name("kubectl sidecar-injector");
        }
        let subcommands: Vec<String> = command
            .get_subcommands()
            .map(|sub| sub.get_name().to_owned())
            .collect();
        let given_count = given.len();
        let args = tumblr_entrypoint(given, |name| {
            std::env::var(name).ok().filter(|v| !v.is_empty())
        });
        // What the entrypoint added: argv[0], `serve`, then the defaults, then what was given.
        let added = args.len() - given_count;
        let entrypoint_defaults = (added > 0).then(|| {
            args[1..=added]
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        });
        let mut args = bare_verbosity(args, &subcommands);
        command.build();
        let mut matches = command.clone().get_matches_from(args.clone());
        if let Some((path, serve, given)) = matches.subcommand().and_then(|(name, sub)| {
            let path = sub
                .try_get_one::<std::path::PathBuf>(settings_file::SETTINGS_FLAG)
                .ok()
                .flatten()?;
            Some((path.clone(), command.find_subcommand(name)?, sub))
        }) {
            let from_file =
                settings_file::arguments_from_file(&path, serve, given).unwrap_or_else(|err| {
                    eprintln!("sidecar-injector: {err}");
                    std::process::exit(2)
                });
            args.extend(from_file);
            matches = command.try_get_matches_from(args).unwrap_or_else(|err| {
                eprintln!(
                    "sidecar-injector: from the settings file {}:",
                    path.display()
                );
                err.exit()
            });
        }
        let mut cli = <Self as clap::FromArgMatches>::from_arg_matches(&matches)
            .unwrap_or_else(|err| err.exit());
        cli.entrypoint_defaults = entrypoint_defaults;
        cli
    }
}

/// The file name kubectl runs for `kubectl sidecar-injector ARGS...` (kubectl turns the dash of
/// a plugin's command into an underscore): a symlink to this binary, which then behaves as
/// `sidecar-injector ARGS...`. kubectl passes `--context`, `--kubeconfig`, `-n` through, and
/// `KUBECONFIG` in the environment, which the commands read as kubectl does.
pub(crate) const KUBECTL_PLUGIN: &str = "kubectl-sidecar_injector";

fn is_kubectl_plugin(argv0: Option<&std::ffi::OsString>) -> bool {
    argv0
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|name| name == KUBECTL_PLUGIN)
}

/// The name Tumblr's Deployment runs (`command: ["entrypoint.sh"]`); the image links it to the
/// binary.
pub(crate) const TUMBLR_ENTRYPOINT: &str = "entrypoint.sh";

/// The defaults of Tumblr's entrypoint script that differ from `serve`'s: the variable, the
/// flag, and the script's value.
const TUMBLR_SCRIPT_DEFAULTS: [(&str, &str, &str); 3] = [
    (
        "ANNOTATION_NAMESPACE",
        "--annotation-namespace",
        "injector.tumblr.com",
    ),
    (
        "CONFIGMAP_LABELS",
        "--configmap-labels",
        "app=k8s-sidecar-injector",
    ),
    ("CONFIG_DIR", "--config-directory", "/conf"),
];

/// Run as `entrypoint.sh`, the binary does what Tumblr's entrypoint script did: `serve`, with
/// the script's defaults for what neither the environment nor the arguments set (annotation
/// namespace `injector.tumblr.com`, ConfigMap labels `app=k8s-sidecar-injector`, config
/// directory `/conf`), so that a Tumblr Deployment whose image is swapped keeps injecting the
/// pods it injected. The script put its flags before the Deployment's `args`, and Go's flags
/// let the last one win; here a flag given in `args` replaces the default instead of
/// repeating it.
pub(crate) fn tumblr_entrypoint(
    args: Vec<std::ffi::OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<std::ffi::OsString> {
    let invoked_as = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|name| name == TUMBLR_ENTRYPOINT);
    if !invoked_as {
        return args;
    }
    let given = |flag: &str| {
        args.iter().skip(1).any(|arg| {
            arg.to_str().is_some_and(|arg| {
                arg == flag
                    || arg
                        .strip_prefix(flag)
                        .is_some_and(|rest| rest.starts_with('='))
            })
        })
    };
    let mut out: Vec<std::ffi::OsString> = vec![args[0].clone(), "serve".into()];
    for (variable, flag, value) in TUMBLR_SCRIPT_DEFAULTS {
        if env(variable).is_none() && !given(flag) {
            out.push(format!("{flag}={value}").into());
        }
    }
    out.extend(args.into_iter().skip(1));
    out
}

/// `-v` (or `--v`) without a value means debug, as a person types it: `sidecar-injector -v
/// serve`. glog's `-v=2` and `-v 2` keep their value; a bare `-v` is one followed by nothing,
/// another flag or a subcommand.
pub(crate) fn bare_verbosity(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    subcommands: &[String],
) -> Vec<std::ffi::OsString> {
    let args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let mut out = Vec::with_capacity(args.len());
    for (index, arg) in args.iter().enumerate() {
        let bare = index > 0 && (arg == "-v" || arg == "--v");
        let next = args.get(index + 1).and_then(|n| n.to_str());
        let takes_next =
            next.is_some_and(|n| !n.starts_with('-') && !subcommands.iter().any(|s| s == n));
        if bare && !takes_next {
            out.push("--log-level=debug".into());
        } else {
            out.push(arg.clone());
        }
    }
    out
}
