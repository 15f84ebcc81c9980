//! `clshim run` with commands that need no OpenCL: exit status and signals pass
//! through, the command is the process itself, variables are kept unless an option is
//! given, the library is found beside the executable or in lib/, and every failure comes
//! before the command starts.

use crate::common;

use common::{clshim, clshim_out, one_line_err, s};

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A real, empty shared object: preloading it changes nothing and prints nothing.
fn empty_so() -> PathBuf {
    common::build_so("empty", "/* nothing */\n")
}

/// Copies the clshim executable to `dest` and runs it: a freshly written executable can
/// briefly be "busy" (ETXTBSY) while another test thread forks, so spawning retries.
fn copied_clshim_output(dest: &Path, args: &[&str]) -> Output {
    if !dest.exists() {
        let tmp = dest.with_extension("tmp");
        std::fs::copy(env!("CARGO_BIN_EXE_clshim"), &tmp).unwrap();
        std::fs::rename(&tmp, dest).unwrap();
    }
    for _ in 0..50 {
        let r = Command::new(dest)
            .env_remove("CLSHIM_LIB")
            .env_remove("LD_PRELOAD")
            .args(args)
            .output();
        match r {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => return r.expect("spawn copied clshim"),
        }
    }
    panic!("{} stayed busy", dest.display());
}

// ---------------------------------------------------------------------- run

#[test]
fn run_passes_exit_status_through() {
    let lib = empty_so();
    let o = clshim_out(&["run", "--lib", s(&lib), "--", "sh", "-c", "exit 7"], &[]);
    assert_eq!(o.status.code(), Some(7), "{}", common::stderr(&o));
}

#[test]
fn run_passes_signal_death_through() {
    let lib = empty_so();
    let o = clshim_out(
        &["run", "--lib", s(&lib), "--", "sh", "-c", "kill -TERM $$"],
        &[],
    );
    assert_eq!(o.status.signal(), Some(libc::SIGTERM), "{:?}", o.status);
}

#[test]
fn run_is_the_command_itself_stdin_stdout_and_pid() {
    let lib = empty_so();
    let mut c = clshim();
    // `exec` keeps the pid: the child's $$ is the pid we spawned.
    c.args([
        "run",
        "--lib",
        s(&lib),
        "--",
        "sh",
        "-c",
        "echo $$; cat; echo err >&2",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let pid = child.id();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from stdin\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    assert_eq!(common::stdout(&o), format!("{pid}\nfrom stdin\n"));
    assert_eq!(common::stderr(&o), "err\n");
}

#[test]
fn run_keeps_user_variables_unless_option_given() {
    let lib = empty_so();
    let other_dir = common::scratch("other");
    let other = other_dir.join("libother.so");
    std::fs::copy(&lib, &other).unwrap();
    let show = "echo $CLSHIM_BINARIES; echo $CLSHIM_DEVICES; echo $LD_PRELOAD";
    let env = [
        ("CLSHIM_BINARIES", "suppress"),
        ("CLSHIM_DEVICES", "all"),
        ("LD_PRELOAD", s(&other)),
    ];
    let o = clshim_out(&["run", "--lib", s(&lib), "--", "sh", "-c", show], &env);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert_eq!(
        common::stdout(&o),
        format!("suppress\nall\n{}:{}\n", lib.display(), other.display())
    );
    let o = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--binaries",
            "substitute",
            "--",
            "sh",
            "-c",
            show,
        ],
        &env,
    );
    assert_eq!(
        common::stdout(&o),
        format!("substitute\nall\n{}:{}\n", lib.display(), other.display())
    );
}

#[test]
fn run_options_set_documented_variables() {
    let lib = empty_so();
    let base = common::scratch("opts");
    let show = "for v in CLSHIM_BINARIES CLSHIM_DEVICES CLSHIM_TRACE_DIR CLSHIM_TRACE_MODE CLSHIM_LOG CLSHIM_SUMMARY; do eval echo $v=\\$$v; done";
    let o = Command::new(env!("CARGO_BIN_EXE_clshim"))
        .current_dir(&base)
        .env_remove("LD_PRELOAD")
        .args([
            "run",
            "--lib",
            s(&lib),
            "--binaries=suppress",
            "--devices",
            "pocl",
            "--trace-dir",
            "t/deep",
        ])
        .args([
            "--trace-mode",
            "0640",
            "--log",
            "clshim=debug,warn",
            "--no-summary",
            "--",
            "sh",
            "-c",
            show,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::stderr(&o));
    let trace_dir = base.join("t/deep");
    assert!(trace_dir.is_dir(), "trace dir not created");
    assert_eq!(
        common::stdout(&o),
        format!(
            "CLSHIM_BINARIES=suppress\nCLSHIM_DEVICES=pocl\nCLSHIM_TRACE_DIR={}\nCLSHIM_TRACE_MODE=0640\n\
             CLSHIM_LOG=clshim=debug,warn\nCLSHIM_SUMMARY=0\n",
            trace_dir.display()
        )
    );
    let o = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--summary",
            "--",
            "sh",
            "-c",
            "echo $CLSHIM_SUMMARY",
        ],
        &[],
    );
    assert_eq!(common::stdout(&o), "1\n");
}

#[test]
fn run_layer_sets_opencl_layers_not_ld_preload() {
    let lib = empty_so();
    let env = [("OPENCL_LAYERS", "/opt/other-layer.so")];
    let o = clshim_out(
        &[
            "run",
            "--layer",
            "--lib",
            s(&lib),
            "--",
            "sh",
            "-c",
            "echo $OPENCL_LAYERS; echo x$LD_PRELOAD",
        ],
        &env,
    );
    assert_eq!(
        common::stdout(&o),
        format!("{}:/opt/other-layer.so\nx\n", lib.display())
    );
}

#[test]
fn run_opens_both_doors_by_default_and_one_with_mode() {
    let lib = empty_so();
    let env = [
        ("LD_PRELOAD", "/opt/other-preload.so"),
        ("OPENCL_LAYERS", "/opt/other-layer.so"),
    ];
    let show = "echo x$LD_PRELOAD; echo x$OPENCL_LAYERS";
    let doors = |mode: &[&str]| {
        let mut a = vec!["run", "--lib", s(&lib)];
        a.extend_from_slice(mode);
        a.extend_from_slice(&["--", "sh", "-c", show]);
        let o = clshim_out(&a, &env);
        assert!(o.status.success(), "{mode:?}: {}", common::stderr(&o));
        common::stdout(&o)
    };
    let l = lib.display();
    let both = format!("x{l}:/opt/other-preload.so\nx{l}:/opt/other-layer.so\n");
    assert_eq!(doors(&[]), both);
    assert_eq!(doors(&["--mode", "both"]), both);
    assert_eq!(
        doors(&["--mode=preload"]),
        format!("x{l}:/opt/other-preload.so\nx/opt/other-layer.so\n")
    );
    assert_eq!(
        doors(&["--mode", "layer"]),
        format!("x/opt/other-preload.so\nx{l}:/opt/other-layer.so\n")
    );
    let o = clshim_out(&["run", "--mode", "dlsym", "--", "true"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(one_line_err(&o).contains("--mode: unknown value 'dlsym'"));
}

#[test]
fn run_finds_library_beside_executable_and_in_lib_dir() {
    // The cdylib cargo builds sits beside the clshim executable.
    let o = clshim_out(&["run", "--", "sh", "-c", "echo $LD_PRELOAD"], &[]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let beside = common::target_dir()
        .join("libclshim.so")
        .canonicalize()
        .unwrap();
    assert_eq!(common::stdout(&o), format!("{}\n", beside.display()));

    // An installed layout: prefix/bin/clshim and prefix/lib/libclshim.so.
    let prefix_dir = common::scratch("prefix");
    let prefix = prefix_dir.canonicalize().unwrap();
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("lib")).unwrap();
    std::fs::copy(empty_so(), prefix.join("lib/libclshim.so")).unwrap();
    let o = copied_clshim_output(
        &prefix.join("bin/clshim"),
        &["run", "--", "sh", "-c", "echo $LD_PRELOAD"],
    );
    assert_eq!(
        common::stdout(&o),
        format!("{}\n", prefix.join("lib/libclshim.so").display())
    );

    // CLSHIM_LIB wins over the lookup.
    let lib = empty_so();
    let o = clshim_out(
        &["run", "--", "sh", "-c", "echo $LD_PRELOAD"],
        &[("CLSHIM_LIB", s(&lib))],
    );
    assert_eq!(common::stdout(&o), format!("{}\n", lib.display()));
}

#[test]
fn run_missing_library_fails_before_command() {
    let d = common::scratch("nolib");
    let marker = d.join("ran");
    let cmd = format!("touch {}", marker.display());
    let o = clshim_out(
        &[
            "run",
            "--lib",
            "/nonexistent/libclshim.so",
            "--",
            "sh",
            "-c",
            &cmd,
        ],
        &[],
    );
    assert_ne!(o.status.code(), Some(0));
    let e = one_line_err(&o);
    assert!(
        e.contains("/nonexistent/libclshim.so") && e.contains("No such file"),
        "{e}"
    );
    let o = clshim_out(
        &["run", "--", "sh", "-c", &cmd],
        &[("CLSHIM_LIB", "/nonexistent/lib2.so")],
    );
    assert_ne!(o.status.code(), Some(0));
    assert!(one_line_err(&o).contains("CLSHIM_LIB '/nonexistent/lib2.so'"));
    assert!(!marker.exists(), "the command ran");

    // No --lib and nothing beside the executable.
    let bin = common::scratch("bare");
    let o = copied_clshim_output(&bin.join("clshim"), &["run", "--", "sh", "-c", &cmd]);
    assert_ne!(o.status.code(), Some(0));
    assert!(one_line_err(&o).starts_with("clshim: cannot find libclshim.so"));
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn run_missing_command_exits_127_not_executable_126() {
    let lib = empty_so();
    let o = clshim_out(
        &["run", "--lib", s(&lib), "--", "no-such-command-xyz", "a"],
        &[],
    );
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(
        one_line_err(&o),
        "clshim: cannot run 'no-such-command-xyz': No such file or directory"
    );
    let d = common::scratch("noexec");
    let f = d.join("script");
    std::fs::write(&f, "#!/bin/sh\nexit 0\n").unwrap();
    let o = clshim_out(&["run", "--lib", s(&lib), "--", s(&f)], &[]);
    assert_eq!(o.status.code(), Some(126));
    assert!(one_line_err(&o).contains("Permission denied"));
}

#[test]
fn run_uncreatable_trace_dir_fails_before_command() {
    let lib = empty_so();
    let marker_dir = common::scratch("notrace");
    let marker = marker_dir.join("ran");
    let cmd = format!("touch {}", marker.display());
    let o = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--trace-dir",
            "/proc/x/y",
            "--",
            "sh",
            "-c",
            &cmd,
        ],
        &[],
    );
    assert_ne!(o.status.code(), Some(0));
    let e = one_line_err(&o);
    assert!(
        e.contains("cannot create trace directory '/proc/x/y'"),
        "{e}"
    );
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn run_rejects_bad_option_values_with_status_2() {
    let lib = empty_so();
    for args in [
        &["run", "--binaries", "keep", "--", "true"][..],
        &["run", "--devices", "gpu", "--", "true"],
        &["run", "--log", "loud", "--", "true"],
        &["run", "--trace-mode", "rw", "--", "true"],
        &["run", "--bogus", "--", "true"],
        &["run", "--lib"],
        &["run", "--"],
        &["frobnicate"],
    ] {
        let mut a = args.to_vec();
        a.splice(1..1, ["--lib", s(&lib)]);
        let o = clshim_out(&a, &[]);
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        let e = one_line_err(&o);
        assert!(e.starts_with("clshim: "), "{e}");
    }
    let o = clshim_out(&["run", "--binaries", "keep", "--", "true"], &[]);
    assert_eq!(
        one_line_err(&o),
        "clshim: --binaries: unknown value 'keep' (expected one of: pass, suppress, substitute)"
    );
}
