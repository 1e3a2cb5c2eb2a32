//! glibc's malloc raises its mmap threshold to the size of the largest block it has freed
//! (up to 32 MiB). After the first large request body, bodies of a few MiB come from the
//! arenas instead of mmap, and an arena keeps what was freed: the hostile-input suite's 40
//! concurrent 6 MiB bodies peaked at 85-104 MiB RSS that way, and at 50-55 MiB with the
//! threshold fixed at glibc's default of 128 KiB. The threshold can only be fixed before
//! malloc starts, through `GLIBC_TUNABLES`, so `serve` re-executes itself once with it set.

use std::ffi::OsString;

/// Fixes the threshold at glibc's starting value, which also turns its raising off.
pub(crate) const TUNABLES: &str = "glibc.malloc.mmap_threshold=131072";

/// Why the process runs without the fixed threshold, to be logged once logging is up.
#[derive(Debug)]
pub(crate) enum Unfixed {
    /// `GLIBC_TUNABLES` was set by the user: it is theirs, and left alone.
    UserTunables(OsString),
    /// The re-execution failed; the process goes on with glibc's defaults.
    ExecFailed(std::io::Error),
}

/// Re-executes this binary with [`TUNABLES`] unless `GLIBC_TUNABLES` is already set (by the
/// user, or by this very re-execution). Returns only when it did not re-execute.
#[cfg(all(unix, target_env = "gnu"))]
pub(crate) fn fix_mmap_threshold() -> Result<(), Unfixed> {
    use std::os::unix::process::CommandExt;

    if let Some(given) = std::env::var_os("GLIBC_TUNABLES") {
        return if given == TUNABLES {
            Ok(())
        } else {
            Err(Unfixed::UserTunables(given))
        };
    }
    let exe = std::env::current_exe().map_err(Unfixed::ExecFailed)?;
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    // argv[0] picks the mode (Tumblr's entrypoint.sh, the kubectl plugin): keep it.
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    Err(Unfixed::ExecFailed(
        command.args(args).env("GLIBC_TUNABLES", TUNABLES).exec(),
    ))
}

/// Other C libraries have no such threshold to fix.
#[cfg(not(all(unix, target_env = "gnu")))]
pub(crate) fn fix_mmap_threshold() -> Result<(), Unfixed> {
    Ok(())
}
