//! Names the build in `fenzi --version`: the commit it was built from (`git rev-parse`, or
//! `FENZI_BUILD_COMMIT` when building outside a git checkout, as a source package does), the
//! profile, and whether it is profile-guided (`scripts/build-release` passes `-Cprofile-use`).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=FENZI_BUILD_COMMIT");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let commit = std::env::var("FENZI_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuild the version when HEAD moves: HEAD itself (a checkout) and the refs (a commit).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        println!("cargo:rerun-if-changed={common}/refs/heads");
        println!("cargo:rerun-if-changed={common}/packed-refs");
    }
    let profile = std::env::var("PROFILE").unwrap_or_default();
    let pgo = std::env::var("CARGO_ENCODED_RUSTFLAGS")
        .unwrap_or_default()
        .split('\x1f')
        .any(|flag| flag.contains("profile-use"));
    let build = format!(
        "{} build, {}",
        if profile == "release" {
            "release"
        } else {
            "debug"
        },
        if pgo {
            "profile-guided"
        } else {
            "not profile-guided"
        }
    );
    println!("cargo:rustc-env=FENZI_COMMIT={commit}");
    println!("cargo:rustc-env=FENZI_BUILD={build}");
}
