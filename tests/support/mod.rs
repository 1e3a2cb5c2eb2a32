#![allow(dead_code)]

pub mod bench;
pub mod cluster;
pub mod e2e;
pub mod helm;
pub mod https;
pub mod injector;
pub mod kubelet;
pub mod kyverno;
pub mod otelcol;
pub mod prometheus;

/// The folder a testbed script (`testbed/NAME`) prints on its last line: where it built or
/// unpacked its tool (kept in a cache, or named by the script's `*_BIN` variable).
pub fn testbed_folder(script: &str) -> std::path::PathBuf {
    let output = std::process::Command::new("bash")
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testbed")
                .join(script),
        )
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|err| panic!("bash runs testbed/{script}: {err}"));
    assert!(output.status.success(), "testbed/{script} failed");
    let stdout = String::from_utf8(output.stdout).unwrap();
    std::path::PathBuf::from(stdout.lines().last().expect("a folder").trim())
}

/// A loopback port free now, for a tool whose config takes no port 0.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
