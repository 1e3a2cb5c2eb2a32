//! Records the git commit the binary is built from, for `--version` and the build_info metric.
//! A build outside a git checkout (the Dockerfile's context leaves `.git` out) takes it from
//! `SIDECAR_INJECTOR_COMMIT`, else says `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SIDECAR_INJECTOR_COMMIT");
    let commit = std::env::var("SIDECAR_INJECTOR_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SIDECAR_INJECTOR_COMMIT={commit}");
}

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    output.status.success().then(|| text.trim().to_owned())
}

fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Rebuilt when HEAD moves: a commit, a checkout, or a ref packed by gc.
    for path in ["HEAD", "packed-refs"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(file) = git(&["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={file}");
    }
    Some(commit)
}
