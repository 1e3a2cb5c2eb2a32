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
    // Rebuilt when HEAD moves: a commit, a checkout, or a ref packed by gc. Only files that
    // exist are named: cargo counts a missing one as changed on every build, and a repository
    // that never packed its refs has no packed-refs, so each build (fat LTO: minutes) compiled
    // the crate again. Packing deletes the loose ref named here, which triggers the rerun that
    // then names packed-refs.
    let mut paths = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    paths.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for path in paths {
        if let Some(file) = git(&["rev-parse", "--git-path", &path])
            && std::path::Path::new(&file).exists()
        {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    Some(commit)
}
