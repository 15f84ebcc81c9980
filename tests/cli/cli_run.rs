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

/// Runs `clshim ARGS` as root without the capabilities that let root write anywhere (so
/// that permission bits count), else as the user it is.
fn clshim_unprivileged(args: &[&str]) -> Output {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return clshim_out(args, &[]);
    }
    common::shim_path();
    let mut c = Command::new("setpriv");
    c.args([
        "--bounding-set=-dac_override,-dac_read_search",
        "--inh-caps=-all",
        "--",
    ])
    .arg(env!("CARGO_BIN_EXE_clshim"))
    .args(args);
    common::run(c, false)
}

/// A trace directory that exists but cannot be written is refused before the command
/// starts, as one that cannot be created is (not found after the job, once per rank).
#[test]
fn run_unwritable_trace_dir_fails_before_command() {
    use std::os::unix::fs::PermissionsExt;
    let lib = empty_so();
    let d = common::scratch("ro-trace");
    let (trace, marker) = (d.join("traces"), d.join("ran"));
    std::fs::create_dir(&trace).unwrap();
    std::fs::set_permissions(&trace, std::fs::Permissions::from_mode(0o555)).unwrap();
    let cmd = format!("touch {}", marker.display());
    let o = clshim_unprivileged(&[
        "run",
        "--lib",
        s(&lib),
        "--trace-dir",
        s(&trace),
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    std::fs::set_permissions(&trace, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    let e = one_line_err(&o);
    assert!(
        e.contains(&format!(
            "cannot write in trace directory '{}'",
            trace.display()
        )) && e.contains("Permission denied"),
        "{e}"
    );
    assert!(!marker.exists(), "the command ran");
    assert_eq!(
        std::fs::read_dir(&trace).unwrap().count(),
        0,
        "no probe left"
    );
}

/// A trace directory that already holds traces gets one warning before the command runs
/// (the report would add both runs together); not from a rank other than 0, whose
/// siblings may have written theirs already.
#[test]
fn run_warns_once_when_the_trace_dir_holds_traces() {
    let lib = empty_so();
    let d = common::scratch("reused-trace");
    std::fs::write(d.join("clshim-h-r0-p1.jsonl"), "{}\n").unwrap();
    let args = ["run", "--lib", s(&lib), "--trace-dir", s(&d), "--", "true"];
    let o = clshim_out(&args, &[]);
    assert_eq!(o.status.code(), Some(0));
    let e = one_line_err(&o);
    assert!(
        e.starts_with(&format!(
            "clshim: warning: trace directory '{}' already holds 1 trace file",
            d.display()
        )) && e.contains("clshim report adds their runs together"),
        "{e}"
    );
    let o = clshim_out(&args, &[("PMI_RANK", "1")]);
    assert_eq!(common::stderr(&o), "", "rank 1 says nothing");
    let fresh = common::scratch("fresh-trace");
    let o = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--trace-dir",
            s(&fresh.join("t")),
            "--",
            "true",
        ],
        &[],
    );
    assert_eq!(common::stderr(&o), "");
}

/// A command that cannot be started leaves no trace directory behind that `clshim run`
/// made for it (one that existed stays), so no empty directory says "no trace files".
#[test]
fn run_removes_the_trace_dir_it_made_for_a_command_not_found() {
    let lib = empty_so();
    let d = common::scratch("no-command");
    let made = d.join("new/traces");
    let o = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--trace-dir",
            s(&made),
            "--",
            "no-such-command-xyz",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(127));
    assert!(!d.join("new").exists(), "the directories it made are gone");
    let o = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--trace-dir",
            s(&d),
            "--",
            "no-such-command-xyz",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(127));
    assert!(d.exists(), "a directory that was there stays");
}

/// Inherited `CLSHIM_*` values are checked once, by `clshim run`, as its options are: a
/// typo is one error before the command starts, not one warning per rank; the option
/// given in its place wins.
#[test]
fn run_checks_inherited_variables_once() {
    let lib = empty_so();
    let d = common::scratch("inherited");
    let marker = d.join("ran");
    let cmd = format!("touch {}", marker.display());
    let args = ["run", "--lib", s(&lib), "--", "sh", "-c", cmd.as_str()];
    for (var, value, words) in [
        (
            "CLSHIM_BINARIES",
            "substitue",
            "expected one of: pass, suppress, substitute",
        ),
        ("CLSHIM_SUMMARY", "maybe", "expected 1, 0"),
        ("CLSHIM_TRACE_MODE", "0999", "octal permission bits"),
    ] {
        let o = clshim_out(&args, &[(var, value)]);
        assert_eq!(o.status.code(), Some(2), "{var}");
        let e = one_line_err(&o);
        assert!(
            e.starts_with(&format!(
                "clshim: {var}=\"{value}\" (from the environment): "
            )) && e.contains(words),
            "{e}"
        );
        assert!(!marker.exists(), "the command ran");
    }
    let o = clshim_out(
        &["run", "--lib", s(&lib), "--binaries", "pass", "--", "true"],
        &[("CLSHIM_BINARIES", "substitue")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let o = clshim_out(&args, &[("CLSHIM_BINARIES", " ")]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "a blank value is unset: {}",
        common::stderr(&o)
    );
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

// ------------------------------------------------------------------ signals

/// The command's ignored and blocked signals (`SigIgn`/`SigBlk` of /proc/self/status),
/// started as `cmd` with `ignored` signals ignored and `blocked` ones blocked, as a
/// parent (nohup, a job system) may start it.
fn signal_state(mut cmd: Command, ignored: &'static [i32], blocked: &'static [i32]) -> String {
    use std::os::unix::process::CommandExt;
    cmd.args(["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]);
    common::clear_shim_env(&mut cmd, &[]);
    let set = move || {
        for &sig in ignored {
            // SAFETY: SIG_IGN installs no handler; a standard signal number.
            unsafe { libc::signal(sig, libc::SIG_IGN) };
        }
        // SAFETY: all-zero bytes are a valid sigset_t.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        for &sig in blocked {
            // SAFETY: `set` is a valid sigset_t, `sig` a standard signal number.
            unsafe { libc::sigaddset(&mut set, sig) };
        }
        // SAFETY: `set` is valid; the old mask is not asked for.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
        Ok(())
    };
    // SAFETY: the closure only calls async-signal-safe functions before exec.
    unsafe { cmd.pre_exec(set) };
    let o = cmd.output().expect("spawn");
    assert!(o.status.success(), "{}", common::stderr(&o));
    common::stdout(&o)
}

/// The command gets the signal dispositions and mask it would get without clshim: Rust's
/// runtime ignores SIGPIPE and `Command` empties the mask, `clshim run` puts back what it
/// was started with.
#[test]
fn run_gives_the_command_the_signals_it_was_started_with() {
    let lib = empty_so();
    for (ignored, blocked) in [
        (&[][..], &[][..]),
        (&[libc::SIGPIPE, libc::SIGHUP][..], &[libc::SIGUSR1][..]),
    ] {
        let without = signal_state(Command::new("env"), ignored, blocked);
        let mut c = common::clshim();
        c.args(["run", "--lib", s(&lib), "--"]);
        let with = signal_state(c, ignored, blocked);
        assert_eq!(with, without, "ignored {ignored:?}, blocked {blocked:?}");
    }
}

/// Under the Python entry point (`python -m clshim`, as the wheel installs it: the
/// package's Python files, the executable and the library side by side) the command does
/// not inherit what Python changed (SIGPIPE and SIGXFSZ ignored), and keeps what its
/// parent set before Python started (an ignored SIGHUP, a blocked signal).
#[test]
fn python_entry_point_gives_the_command_the_signals_it_would_get_without_clshim() {
    let d = common::scratch("python-signals");
    let pkg = d.join("clshim");
    std::fs::create_dir_all(&pkg).unwrap();
    for f in ["__init__.py", "__main__.py"] {
        std::fs::copy(
            common::repo_root().join("python/clshim").join(f),
            pkg.join(f),
        )
        .unwrap();
    }
    std::fs::copy(common::shim_path(), pkg.join("libclshim.so")).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_clshim"), pkg.join("clshim")).unwrap();
    for (ignored, blocked) in [
        (&[][..], &[][..]),
        (&[libc::SIGHUP][..], &[libc::SIGUSR1][..]),
    ] {
        let without = signal_state(Command::new("env"), ignored, blocked);
        let mut c = Command::new("python3");
        c.env("PYTHONPATH", &*d).args(["-m", "clshim", "run", "--"]);
        let with = signal_state(c, ignored, blocked);
        assert_eq!(with, without, "ignored {ignored:?}, blocked {blocked:?}");
    }
}

// ------------------------------------------------------------------ library paths

/// A library path with a space or a colon: the loaders split `LD_PRELOAD` at both and
/// `OPENCL_LAYERS` at colons, with no escape, so `clshim run` refuses such a path for a
/// door that cannot hold it, naming the path and what to do, before the command starts
/// (never a run that records nothing). A door that can hold it runs, and so does a link
/// to the library from a plain path.
#[test]
fn run_refuses_a_library_path_its_doors_cannot_hold() {
    let d = common::scratch("odd-lib-path");
    for (dir, refused) in [
        ("My Project", &["both", "preload"][..]),
        ("a:b", &["both", "preload", "layer"][..]),
    ] {
        let lib = d.join(dir).join("libclshim.so");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::copy(empty_so(), &lib).unwrap();
        for mode in ["both", "preload", "layer"] {
            let marker = d.join(format!("ran-{mode}"));
            let _ = std::fs::remove_file(&marker);
            let o = clshim_out(
                &[
                    "run",
                    "--mode",
                    mode,
                    "--lib",
                    s(&lib),
                    "--",
                    "sh",
                    "-c",
                    "echo \"$OPENCL_LAYERS\" > \"$0\"",
                    s(&marker),
                ],
                &[],
            );
            if refused.contains(&mode) {
                assert_eq!(o.status.code(), Some(1), "{dir} {mode}: {o:?}");
                let e = one_line_err(&o);
                assert!(e.contains(&format!("'{}'", lib.display())), "{e}");
                assert!(e.contains("--lib"), "{e}");
                assert!(!marker.exists(), "{dir} {mode}: the command ran");
            } else {
                assert!(o.status.success(), "{dir} {mode}: {}", common::stderr(&o));
                let layers = std::fs::read_to_string(&marker).unwrap();
                assert_eq!(layers.trim_end(), lib.to_str().unwrap());
            }
        }
        // The way out the message gives: a link from a path without either.
        let link = d.join(format!("link-{}.so", dir.len()));
        std::os::unix::fs::symlink(&lib, &link).unwrap();
        let o = clshim_out(
            &[
                "run",
                "--lib",
                s(&link),
                "--",
                "sh",
                "-c",
                "echo $LD_PRELOAD",
            ],
            &[],
        );
        assert!(o.status.success(), "{}", common::stderr(&o));
        assert_eq!(common::stdout(&o).trim_end(), link.to_str().unwrap());
    }
}

/// Another copy of clshim's library already in `LD_PRELOAD` or `OPENCL_LAYERS` (a module
/// file's, a user's own setting) is recognised and dropped, whatever path names it: the
/// same file by a hard link, a file named like the library, a renamed copy (by the name
/// every copy exports). Other libraries stay, in their order.
#[test]
fn run_drops_other_copies_of_the_library_from_both_doors() {
    let d = common::scratch("other-copies");
    let lib = d.join("mine/libclshim.so");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    std::fs::copy(common::shim_path(), &lib).unwrap();
    let hard = d.join("hardlink.so");
    std::fs::hard_link(&lib, &hard).unwrap();
    let module = d.join("module/libclshim.so");
    std::fs::create_dir_all(module.parent().unwrap()).unwrap();
    std::fs::copy(empty_so(), &module).unwrap();
    let renamed = d.join("libprofiler.so");
    std::fs::copy(common::shim_path(), &renamed).unwrap();
    let other = d.join("libother.so");
    std::fs::copy(empty_so(), &other).unwrap();
    let list = format!(
        "{}:{}:{}:{}",
        module.display(),
        hard.display(),
        other.display(),
        renamed.display()
    );
    // Not a file to read for the marker (reading it would never end): kept. Only in
    // OPENCL_LAYERS, which `sh` does not load.
    let fifo = d.join("fifo.so");
    let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
    let layers = format!("{list}:{}", fifo.display());
    let o = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--",
            "sh",
            "-c",
            "echo \"$LD_PRELOAD\"; echo \"$OPENCL_LAYERS\"",
        ],
        &[("LD_PRELOAD", &list), ("OPENCL_LAYERS", &layers)],
    );
    assert!(o.status.success(), "{}", common::stderr(&o));
    let want = format!("{}:{}", lib.display(), other.display());
    assert_eq!(
        common::stdout(&o),
        format!("{want}\n{want}:{}\n", fifo.display())
    );
}
