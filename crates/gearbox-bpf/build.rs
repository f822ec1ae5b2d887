//! Compiles the BPF programs in `bpf/` with clang (`libbpf-cargo`) into `OUT_DIR`,
//! where `src/` embeds the objects. `scripts/setup.sh` installs clang.

use std::path::PathBuf;

/// The programs in `bpf/`, each `NAME.bpf.c` compiled to `OUT_DIR/NAME.bpf.o`.
const PROGRAMS: &[&str] = &["westwood", "iw"];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // (BPF target macro, Debian's multiarch include folder for <asm/types.h>, which the
    // UAPI headers of the sock_ops program need.)
    let (arch, multiarch) = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => ("x86", "/usr/include/x86_64-linux-gnu"),
        Ok("aarch64") => ("arm64", "/usr/include/aarch64-linux-gnu"),
        Ok(other) => panic!("gearbox-bpf: no BPF target mapping for architecture {other}"),
        Err(_) => panic!("gearbox-bpf: cargo did not set CARGO_CFG_TARGET_ARCH"),
    };
    for name in PROGRAMS {
        let src = format!("bpf/{name}.bpf.c");
        let obj = out.join(format!("{name}.bpf.o"));
        if let Err(e) = libbpf_cargo::SkeletonBuilder::new()
            .source(&src)
            .obj(&obj)
            .clang_args([
                format!("-D__TARGET_ARCH_{arch}"),
                format!("-I{multiarch}"),
                "-Wall".to_string(),
                "-Werror".to_string(),
            ])
            .build()
        {
            panic!("gearbox-bpf: compiling {src} failed (is clang installed? scripts/setup.sh installs it): {e:#}");
        }
        println!("cargo:rerun-if-changed={src}");
    }
    println!("cargo:rerun-if-changed=bpf/kernel_types.h");
}
