//! A build the program cache serves gives what the driver's compile gives now, whatever
//! the text, the options and the environment: the findings of issue 30, where an entry's
//! key came from a hand-written preprocessor that read texts, options and the environment
//! otherwise than clang and pocl do, and served a build after the header the compile read
//! had changed. Each case builds tests/c/key_client.c (a kernel writing VAL, which a header
//! on disk defines) under `clshim run --program-cache` with requests, runs the warm step,
//! checks that the build is now served, changes what the compile reads, and checks that
//! the next run under the cache prints what a run without clshim prints. Cases whose build
//! depends on the moment or place of the compile (`__TIME__`, `__FILE__` of pocl's
//! temporary copy) are never served, and the warm step says why.

use crate::common::*;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn client() -> PathBuf {
    build_c("key_client", &[])
}

struct Case {
    d: Scratch,
    bin: PathBuf,
    /// Where the client runs (its working directory).
    app: PathBuf,
    /// `clshim run --mode` for the runs under the cache.
    mode: &'static str,
}

/// What one run printed, how many of its builds the store served, and why the others
/// were not (their records' `not_served` kinds, in order) with the exit line saying so.
struct Ran {
    out: String,
    served: usize,
    not_served: Vec<String>,
    stderr: String,
    /// Each build record's `shared` (what it did with kept and shared compiles).
    shared: Vec<String>,
}

impl Case {
    fn new(tag: &str) -> Case {
        let d = scratch(tag);
        let app = d.path("app");
        std::fs::create_dir_all(&app).unwrap();
        // The case's own temporary folder: the node's folder there holds only what its own
        // runs published (another case's compile of the same text would be a peer's).
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(d.path("tmp"))
            .unwrap();
        Case {
            bin: client(),
            app,
            d,
            mode: "both",
        }
    }

    fn store(&self) -> PathBuf {
        self.d.path("store")
    }

    /// Writes `bytes` at `rel` below the scratch folder (making its folders).
    fn write(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        write_at(&self.d.path(rel), bytes)
    }

    /// The client with `args` in `cwd`, plain or under the program cache (requests left),
    /// each way with its own pocl kernel cache (`kc-plain`, `kc-cache`) unless `env` names
    /// one.
    fn run_in(&self, cwd: &Path, cached: bool, args: &[OsString], env: &[(&str, String)]) -> Ran {
        let traces = self.d.path(&format!("traces-{}", next()));
        let mode = cached.then_some(self.mode);
        let mut cmd = program_cache_command(&self.bin, mode, &traces);
        cmd.args(args).current_dir(cwd);
        clear_shim_env(&mut cmd, &[]);
        cmd.env("HOME", self.d.path("home"))
            .env("TMPDIR", self.d.path("tmp"))
            .env(
                "POCL_CACHE_DIR",
                self.d.path(if cached { "kc-cache" } else { "kc-plain" }),
            )
            .env_remove("POCL_EXTRA_BUILD_FLAGS");
        if cached {
            cmd.env("CLSHIM_NATIVE_STORE", self.store())
                .env("CLSHIM_WARM_SERVICE", "0");
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{args:?} cached={cached}: {}",
            stderr(&out)
        );
        let records = if traces.exists() {
            checked_traces(&traces)
        } else {
            Vec::new()
        };
        let served = records
            .iter()
            .filter(|r| r["event"] == "build" && r["served"] == "store")
            .count();
        assert!(!stderr(&out).contains("internal error"), "{}", stderr(&out));
        let not_served = records
            .iter()
            .filter(|r| r["event"] == "build")
            .filter_map(|r| r["not_served"]["kind"].as_str().map(str::to_string))
            .collect();
        let shared = records
            .iter()
            .filter(|r| r["event"] == "build")
            .filter_map(|r| r["shared"].as_str().map(str::to_string))
            .collect();
        Ran {
            out: stdout(&out),
            served,
            not_served,
            stderr: stderr(&out),
            shared,
        }
    }

    fn run(&self, cached: bool, args: &[OsString], env: &[(&str, String)]) -> Ran {
        self.run_in(&self.app, cached, args, env)
    }

    /// `clshim warm` on the store, in the foreground; its standard error.
    fn warm(&self) -> String {
        let mut c = clshim();
        c.args([
            "warm",
            "--store",
            s(&self.store()),
            "--lib",
            s(&shim_path()),
        ])
        .current_dir(self.d.path(""));
        clear_shim_env(&mut c, &[]);
        c.env_remove("POCL_EXTRA_BUILD_FLAGS")
            .env("HOME", self.d.path("home"));
        let out = c.output().unwrap();
        assert!(out.status.success(), "clshim warm: {}", stderr(&out));
        stderr(&out)
    }

    /// A cold run under the cache and the warm step; then the build must be served, with
    /// what a run without clshim prints.
    fn fill(&self, args: &[OsString], env: &[(&str, String)]) -> String {
        let plain = self.run(false, args, env).out;
        let cold = self.run(true, args, env);
        assert_eq!(cold.out, plain, "cold, as without clshim");
        let log = self.warm();
        let warm = self.run(true, args, env);
        assert_eq!(warm.out, plain, "served, as without clshim: {log}");
        assert_eq!(
            warm.served,
            plain.lines().count(),
            "every build served after the warm step: {log}"
        );
        plain
    }

    /// After `fill`: a run under the cache prints what a run without clshim prints now.
    fn as_plain_now(&self, args: &[OsString], env: &[(&str, String)]) -> Ran {
        let plain = self.run(false, args, env).out;
        let cached = self.run(true, args, env);
        assert_eq!(cached.out, plain, "under the cache, as without clshim");
        cached
    }
}

fn write_at(path: &Path, bytes: &[u8]) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

fn next() -> usize {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

const KERNEL: &[u8] = b"__kernel void val(__global int *out) { out[0] = VAL; }\n";

fn source(head: &[u8]) -> Vec<u8> {
    [head, KERNEL].concat()
}

/// `--name=value`, byte for byte.
fn arg(name: &str, value: &[u8]) -> OsString {
    OsStr::from_bytes(&[format!("--{name}=").as_bytes(), value].concat()).to_os_string()
}

fn path_arg(name: &str, value: &Path) -> OsString {
    arg(name, value.as_os_str().as_bytes())
}

/// A case in which `val.h`, found through `head` (the source's first lines, with `extra`
/// files beside it and `options`), says VAL 1; after the warm step it says VAL 2, and the
/// cached run must print 2.
fn edited_header_is_read(
    tag: &str,
    head: &[u8],
    extra: &[(&str, &[u8])],
    options: &[u8],
    hdr: &[u8],
) {
    let env: &[(&str, String)] = &[];
    let c = Case::new(tag);
    let src = c.write("src.cl", &source(head));
    for (rel, bytes) in extra {
        c.write(rel, bytes);
    }
    let val = c.d.join(OsStr::from_bytes(hdr));
    write_at(&val, b"#define VAL 1\n");
    let args = [path_arg("source", &src), arg("options", options)];
    assert_eq!(c.fill(&args, env), "VAL=1\n", "{tag}");
    write_at(&val, b"#define VAL 2\n");
    let now = c.as_plain_now(&args, env);
    assert_eq!(now.out, "VAL=2\n", "{tag}: the edited header");
    assert_eq!(now.served, 0, "{tag}");
}

// A ninth, from the adversarial review of the keys taken from the compile: a header read
// under a name of the process's own /proc entries, which the manifest skipped, so an entry
// was served after the header changed. Such a build is not kept (no entry could check a
// file by a name that is not its own): the warm step says why, and every run compiles.

/// A build whose `val.h` is read through `/proc/self/cwd` (by its `#include`, or by an
/// `-I` option) prints the header's value of the moment, after the warm step too.
#[test]
fn a_header_named_through_proc_self_is_never_served() {
    for (tag, head, options, hdr) in [
        (
            "include",
            &b"#include \"/proc/self/cwd/val.h\"\n"[..],
            &b""[..],
            "val.h",
        ),
        (
            "option",
            b"#include \"val.h\"\n",
            b"-I/proc/self/cwd/inc",
            "inc/val.h",
        ),
    ] {
        let c = Case::new(&format!("proc-self-{tag}"));
        let src = c.write("src.cl", &source(head));
        let val = c.write(&format!("app/{hdr}"), b"#define VAL 1\n");
        let args = [path_arg("source", &src), arg("options", options)];
        assert_eq!(c.run(false, &args, &[]).out, "VAL=1\n", "{tag}");
        assert_eq!(c.run(true, &args, &[]).out, "VAL=1\n", "{tag}");
        let log = c.warm();
        assert!(
            log.contains("not kept: the compile read /proc/self/cwd"),
            "{tag}: {log}"
        );
        write_at(&val, b"#define VAL 2\n");
        let now = c.as_plain_now(&args, &[]);
        assert_eq!((now.out.as_str(), now.served), ("VAL=2\n", 0), "{tag}");
    }
}

// What clang reads as a directive, a hand-written lexer did not.

/// A UTF-8 byte order mark before the source's first `#include`.
#[test]
fn a_byte_order_mark_before_an_include() {
    edited_header_is_read(
        "lex-bom",
        b"\xef\xbb\xbf#include \"val.h\"\n",
        &[],
        b"-I hdr",
        b"app/hdr/val.h",
    );
}

/// A byte order mark at the start of a header, before its `#include`.
#[test]
fn a_byte_order_mark_in_a_header() {
    edited_header_is_read(
        "lex-bom-header",
        b"#include \"a.h\"\n",
        &[("app/hdr/a.h", b"\xef\xbb\xbf#include \"val.h\"\n")],
        b"-I hdr",
        b"app/hdr/val.h",
    );
}

/// A digraph `%:include`.
#[test]
fn a_digraph_include() {
    edited_header_is_read(
        "lex-digraph",
        b"%:include \"val.h\"\n",
        &[],
        b"-I hdr",
        b"app/hdr/val.h",
    );
}

/// A trigraph `??=include` (clang keeps trigraphs on for OpenCL C).
#[test]
fn a_trigraph_include() {
    edited_header_is_read(
        "lex-trigraph",
        b"??=include \"val.h\"\n",
        &[],
        b"-I hdr",
        b"app/hdr/val.h",
    );
}

/// A header whose lines end with a lone CR.
#[test]
fn lines_ended_by_a_lone_cr() {
    edited_header_is_read(
        "lex-cr",
        b"#include \"a.h\"\n",
        &[("app/hdr/a.h", b"#define X 1\r#include \"val.h\"\r")],
        b"-I hdr",
        b"app/hdr/val.h",
    );
}

/// A NUL byte before `#` (clang reads it as white space).
#[test]
fn a_nul_byte_before_an_include() {
    edited_header_is_read(
        "lex-nul",
        b"#include \"a.h\"\n",
        &[("app/hdr/a.h", b"\0#include \"val.h\"\n")],
        b"-I hdr",
        b"app/hdr/val.h",
    );
}

// pocl hands clang its options split at any whitespace.

/// A tab before `-I`.
#[test]
fn an_include_folder_after_a_tab() {
    edited_header_is_read(
        "opt-tab",
        b"#include \"val.h\"\n",
        &[],
        b"-DX=1\t-Iinc",
        b"app/inc/val.h",
    );
}

/// A newline before `-I`.
#[test]
fn an_include_folder_after_a_newline() {
    edited_header_is_read(
        "opt-newline",
        b"#include \"val.h\"\n",
        &[],
        b"-DX=1\n-Iinc",
        b"app/inc/val.h",
    );
}

/// `-include` with tabs, which pocl's own option check takes as part of a `-D`.
#[test]
fn an_include_option_hidden_by_tabs() {
    edited_header_is_read(
        "opt-include",
        b"\n",
        &[],
        b"-DX=1\t-include\tcfg.h",
        b"app/cfg.h",
    );
}

// An include named by macros resolves as clang resolves it.

const M2S: &[u8] = b"-D XM2S(x)=#x -D M2S(x)=XM2S(x)";

/// A definition in a branch not taken names nothing.
#[test]
fn a_macro_defined_in_a_branch_not_taken() {
    edited_header_is_read(
        "macro-untaken",
        b"#ifdef NEVER\n#define WHICH other\n#endif\n#include M2S(WHICH/val.h)\n",
        &[("app/other/val.h", b"#define VAL 7\n")],
        M2S,
        b"app/WHICH/val.h",
    );
}

/// A definition after the `#include` names nothing at that line.
#[test]
fn a_macro_defined_after_the_include() {
    edited_header_is_read(
        "macro-after",
        b"#include M2S(P/val.h)\n#define P other\n",
        &[("app/other/val.h", b"#define VAL 7\n")],
        M2S,
        b"app/P/val.h",
    );
}

/// pocl's pre-included macros take part (`max` is `_cl_max`).
#[test]
fn a_macro_of_pocls_own_headers() {
    edited_header_is_read(
        "macro-pocl",
        b"#include M2S(max/val.h)\n",
        &[("app/max/val.h", b"#define VAL 3\n")],
        M2S,
        b"app/_cl_max/val.h",
    );
}

/// A Latin-1 byte in the name, from the options (the hand-written expander decoded it
/// lossily, or panicked at every build).
#[test]
fn a_latin1_name_from_the_options() {
    edited_header_is_read(
        "macro-latin1",
        b"#include M2S(P/val.h)\n",
        &[],
        &[M2S, b" -DP=h\xe9"].concat(),
        b"app/h\xe9/val.h",
    );
}

// The driver's environment, as it is at each build.

/// pocl reads `POCL_EXTRA_BUILD_FLAGS` at every build: an application that sets it after
/// its first program builds its second with it, and each is served its own build.
#[test]
fn the_environment_of_each_build_is_its_own() {
    let c = Case::new("env-late");
    let src = c.write("src.cl", &source(b"#ifndef VAL\n#define VAL 1\n#endif\n"));
    let args = [
        path_arg("source", &src),
        OsString::from("--then-env=POCL_EXTRA_BUILD_FLAGS=-DVAL=7"),
    ];
    assert_eq!(c.fill(&args, &[]), "VAL=1\nVAL=7\n");
}

/// A `-I` in `POCL_EXTRA_BUILD_FLAGS` (pocl's documented way to add include folders) puts
/// its folder on the compile's path.
#[test]
fn an_include_folder_from_the_drivers_environment() {
    let c = Case::new("env-include");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    let val = c.write("app/hdr/val.h", b"#define VAL 1\n");
    let env = [(
        "POCL_EXTRA_BUILD_FLAGS",
        format!("-I {}", s(&c.d.path("app/hdr"))),
    )];
    let args = [path_arg("source", &src)];
    assert_eq!(c.fill(&args, &env), "VAL=1\n");
    write_at(&val, b"#define VAL 2\n");
    let now = c.as_plain_now(&args, &env);
    assert_eq!((now.out.as_str(), now.served), ("VAL=2\n", 0));
}

/// pocl compiles its copy of the source in its cache folder, so a quoted include is
/// looked for there first: a header that appears there is read.
#[test]
fn a_header_in_pocls_cache_folder_is_read_first() {
    let c = Case::new("pocl-folder");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    c.write("app/hdr/val.h", b"#define VAL 1\n");
    let args = [path_arg("source", &src), OsString::from("--options=-I hdr")];
    assert_eq!(c.fill(&args, &[]), "VAL=1\n");
    for kc in ["kc-plain", "kc-cache"] {
        c.write(&format!("{kc}/val.h"), b"#define VAL 9\n");
    }
    let now = c.as_plain_now(&args, &[]);
    assert_eq!(now.out, "VAL=9\n");
    assert_eq!(now.served, 0);
}

/// A name the compile found absent that cannot be looked up now (a link loop where the
/// first `-I` folder had no `val.h`): clang fails the build on it, where before it went
/// on to the next folder, so the entry is not served (a review found it served, VAL=5,
/// where a build without clshim fails).
#[test]
fn a_name_that_cannot_be_looked_up_now_is_not_absent() {
    let c = Case::new("absent-loop");
    let src = c.write("src.cl", &source(b"#include <val.h>\n"));
    std::fs::create_dir_all(c.d.path("app/first")).unwrap();
    c.write("app/inc/val.h", b"#define VAL 5\n");
    let args = [
        path_arg("source", &src),
        OsString::from("--options=-I first -I inc"),
    ];
    assert_eq!(c.fill(&args, &[]), "VAL=5\n");
    std::os::unix::fs::symlink("val.h", c.d.path("app/first/val.h")).unwrap();
    let now = c.as_plain_now(&args, &[]);
    assert!(now.out.starts_with("build: CL_"), "{}", now.out);
    assert_eq!(now.served, 0);
}

/// pocl reads its cache folder once, when it starts: an application that sets
/// `POCL_CACHE_DIR` later still has its quoted includes looked for in the first folder.
/// A header that appears there is read by a build after the change too (a review found
/// it served from the store, VAL=5 for 9, the manifest checked in the new folder); a
/// process whose environment names another folder than at its first OpenCL call is
/// served no build that looked in pocl's cache folder.
#[test]
fn pocls_cache_folder_is_the_one_it_started_with() {
    let c = Case::new("pocl-folder-late");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    c.write("app/hdr/val.h", b"#define VAL 5\n");
    let args = |kc: &str| {
        [
            path_arg("source", &src),
            OsString::from("--options=-I hdr"),
            OsString::from(format!("--then-env=POCL_CACHE_DIR={}", s(&c.d.path(kc)))),
        ]
    };
    // Filled with the late folder the same as the first: served both times.
    assert_eq!(c.fill(&args("kc-cache"), &[]), "VAL=5\nVAL=5\n");
    for kc in ["kc-plain", "kc-cache"] {
        c.write(&format!("{kc}/val.h"), b"#define VAL 9\n");
    }
    // The late folder exists, empty, as one a job script made.
    std::fs::create_dir_all(c.d.path("kc-late")).unwrap();
    let now = c.as_plain_now(&args("kc-late"), &[]);
    assert_eq!(now.out, "VAL=9\nVAL=9\n");
    assert_eq!(now.served, 0);
}

/// pocl's kernel library reinstalled under the same libpocl (a copy of pocl with kernel
/// libraries of its own, one touched after the warm step): another build, which is not
/// served. A warm worker loads the library once, at its first compile, so no entry's own
/// compile read it; a review found the entry served all the same, and CI found it again
/// where the copy was root's (the front end's list once served alone for a driver whose
/// every file was root's, taken for the system's packages).
#[test]
fn a_kernel_library_reinstalled_is_another_build() {
    let (c, env, args) = filled_on_a_pocl_copy("kernel-library");
    touch_kernel_library(&c);
    let now = c.as_plain_now(&args, &env);
    assert_eq!(
        (now.out.as_str(), now.served),
        ("VAL=3\n", 0),
        "{:?}",
        now.not_served
    );
}

/// The same for a kept compile (the program cache's, taken on a node whose pocl cache is
/// fresh): pocl's cache entry holds the kernel library linked in, and pocl finds it by the
/// library's SHA-1 from when libpocl was built, so a review found the old library's build
/// served where pocl alone, with a fresh cache, links the new one. Compiled again, and kept
/// again for the next node.
#[test]
fn a_kernel_library_reinstalled_is_another_build_for_kept_compiles() {
    let c = Case::new("kept-kernel-library");
    let vendors = pocl_copy_with_kernel_library(&c.d);
    let src = c.write("src.cl", &source(b"#define VAL 3\n"));
    let args = [path_arg("source", &src)];
    let node = |n: &str| {
        let t = c.d.path(&format!("tmp-{n}"));
        std::fs::create_dir_all(&t).unwrap();
        [
            ("OCL_ICD_VENDORS", s(&vendors).to_string()),
            (
                "POCL_CACHE_DIR",
                s(&c.d.path(&format!("kc-{n}"))).to_string(),
            ),
            ("TMPDIR", s(&t).to_string()),
        ]
    };
    assert_eq!(c.run(true, &args, &node("first")).shared, ["compiled"]);
    let taken = c.run(true, &args, &node("taken"));
    assert_eq!(taken.shared, ["from_store"], "{}", taken.stderr);
    touch_kernel_library(&c);
    let next = c.run(true, &args, &node("next"));
    assert_eq!(
        (next.out.as_str(), &next.shared[..]),
        ("VAL=3\n", &["compiled".to_string()][..]),
        "{}",
        next.stderr
    );
    let later = c.run(true, &args, &node("later"));
    assert_eq!(later.shared, ["from_store"], "{}", later.stderr);
}

/// The environment of a node of its own (pocl cache, temporary folder) on the case's copy
/// of pocl (ICD folder `vendors`).
fn node_on(c: &Case, vendors: &Path, n: &str) -> [(&'static str, String); 3] {
    let t = c.d.path(&format!("tmp-{n}"));
    std::fs::create_dir_all(&t).unwrap();
    [
        ("OCL_ICD_VENDORS", s(vendors).to_string()),
        (
            "POCL_CACHE_DIR",
            s(&c.d.path(&format!("kc-{n}"))).to_string(),
        ),
        ("TMPDIR", s(&t).to_string()),
    ]
}

/// Sets the times of `dir` and of everything below it `seconds` back.
fn times_back_below(dir: &Path, seconds: i64) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            times_back_below(&e.path(), seconds);
        } else {
            set_times_back(&e.path(), seconds);
        }
    }
    set_times_back(dir, seconds);
}

/// A node whose pocl cache holds a build from before the kernel library was replaced (under
/// the same libpocl, pocl's cache answers with it, linked with the old library): the hit is
/// neither kept nor shared under the new library's key, so a fresh node compiles as without
/// clshim. A review found it kept, and a fresh node took the old library's program.
#[test]
fn a_pocl_cache_older_than_its_kernel_library_is_not_kept() {
    let c = Case::new("kept-older-cache");
    let vendors = pocl_copy_with_kernel_library(&c.d);
    let src = c.write("src.cl", &source(b"#define VAL 3\n"));
    let args = [path_arg("source", &src)];
    assert_eq!(
        c.run(true, &args, &node_on(&c, &vendors, "a")).shared,
        ["compiled"]
    );
    // An earlier day's build (not one of the last second's, which clshim takes for this
    // build's own).
    times_back_below(&c.d.path("kc-a"), 3600);
    replace_kernel_library(&c.d.path("driver/share/pocl"));
    let again = c.run(true, &args, &node_on(&c, &vendors, "a"));
    assert_eq!(again.shared, ["own_cache"], "{}", again.stderr);
    let fresh = c.run(true, &args, &node_on(&c, &vendors, "fresh"));
    assert_eq!(fresh.shared, ["compiled"], "{}", fresh.stderr);
    let later = c.run(true, &args, &node_on(&c, &vendors, "later"));
    assert_eq!(later.shared, ["from_store"], "{}", later.stderr);
}

/// The first launch of a build taken from the store where pocl's cache already had the
/// program's folder, from a run without clshim before the kernel library was replaced
/// (nothing copied: pocl answers from its own folder, linked with the old library): the
/// kernel pocl compiles from it is not kept. A review found it kept under the new
/// library's key, and a later node took the old library's kernel.
#[test]
fn a_first_launch_from_an_unmarked_program_folder_is_not_kept() {
    let c = Case::new("kept-launch-unmarked");
    let vendors = pocl_copy_with_kernel_library(&c.d);
    let src = c.write("src.cl", &source(b"#define VAL 3\n"));
    let args = [path_arg("source", &src)];
    c.run(false, &args, &node_on(&c, &vendors, "a"));
    // The node never launched the kernel (its specialisation gone).
    for level in std::fs::read_dir(c.d.path("kc-a")).unwrap().flatten() {
        for p in std::fs::read_dir(level.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::remove_dir_all(p.path().join("val"));
        }
    }
    times_back_below(&c.d.path("kc-a"), 3600);
    replace_kernel_library(&c.d.path("driver/share/pocl"));
    let fresh = c.run(true, &args, &node_on(&c, &vendors, "fresh"));
    assert_eq!(fresh.shared, ["compiled"], "{}", fresh.stderr);
    let launches = || -> Vec<PathBuf> {
        std::fs::read_dir(c.store().join("compiles"))
            .unwrap()
            .flatten()
            .flat_map(|k| std::fs::read_dir(k.path()).into_iter().flatten().flatten())
            .map(|f| f.path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().to_string();
                n.ends_with(".kc") && n != "build.kc"
            })
            .collect()
    };
    // No launch kept (as where the fresh node's launch was not kept).
    for f in launches() {
        std::fs::remove_file(f).unwrap();
    }
    let a = c.run(true, &args, &node_on(&c, &vendors, "a"));
    assert_eq!(a.out, "VAL=3\n");
    assert!(launches().is_empty(), "{:?}: {}", launches(), a.stderr);
}

/// A process that saw pocl's kernel library replaced after its first build (pocl loaded the
/// old one, once a process) keeps none of its later builds: which library they linked cannot
/// be told. A review found the later build kept under the new library's key, with the old
/// library's program, and taken by a fresh node.
#[test]
fn a_process_that_saw_its_kernel_library_replaced_keeps_no_later_build() {
    let c = Case::new("kept-library-mid-process");
    let vendors = pocl_copy_with_kernel_library(&c.d);
    let a = c.write("a.cl", &source(b"#define VAL 3\n"));
    let b = c.write("b.cl", &source(b"#define VAL 4\n"));
    let go = c.d.path("go");
    let changer = {
        let (built, go, share) = (
            c.d.path("go.built"),
            go.clone(),
            c.d.path("driver/share/pocl"),
        );
        std::thread::spawn(move || {
            while !built.exists() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            replace_kernel_library(&share);
            std::fs::write(go, b"").unwrap();
        })
    };
    let long = c.run(
        true,
        &[
            path_arg("source", &a),
            path_arg("then-wait-for", &go),
            path_arg("then-source", &b),
        ],
        &node_on(&c, &vendors, "long"),
    );
    changer.join().unwrap();
    assert_eq!(long.out, "VAL=3\nVAL=4\n");
    assert_eq!(long.shared, ["compiled", "compiled"], "{}", long.stderr);
    let args = [path_arg("source", &b)];
    let fresh = c.run(true, &args, &node_on(&c, &vendors, "fresh"));
    assert_eq!(fresh.shared, ["compiled"], "{}", fresh.stderr);
}

/// Sets the time of every kernel library file of the case's copy of pocl 5 s ahead, as a
/// reinstall under the same libpocl would.
fn touch_kernel_library(c: &Case) {
    for e in std::fs::read_dir(c.d.path("driver/share/pocl"))
        .unwrap()
        .flatten()
    {
        if e.file_name().to_string_lossy().ends_with(".bc") {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(e.path())
                .unwrap();
            f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
                .unwrap();
        }
    }
}

/// A kernel library variant that appears beside the others under the same libpocl (pocl
/// falls back to another where the one it looks for is missing, so the new file may be
/// the one it finds now): another build, which is not served.
#[test]
fn a_kernel_library_variant_that_appears_is_another_build() {
    let (c, env, args) = filled_on_a_pocl_copy("kernel-variant");
    let share = c.d.path("driver/share/pocl");
    let any = std::fs::read_dir(&share)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".bc"))
        .expect("a kernel library");
    std::fs::copy(any.path(), share.join("kernel-clshim-test-variant.bc")).unwrap();
    let now = c.as_plain_now(&args, &env);
    assert_eq!(
        (now.out.as_str(), now.served),
        ("VAL=3\n", 0),
        "{:?}",
        now.not_served
    );
}

/// A case on a copy of pocl with kernel libraries and headers of its own
/// (`pocl_copy_with_kernel_library`), its build (VAL=3) filled and served; with the
/// environment and arguments of its runs.
fn filled_on_a_pocl_copy(tag: &str) -> (Case, [(&'static str, String); 1], [OsString; 1]) {
    let c = Case::new(tag);
    let vendors = pocl_copy_with_kernel_library(&c.d);
    let env = [("OCL_ICD_VENDORS", s(&vendors).to_string())];
    let src = c.write("src.cl", &source(b"#define VAL 3\n"));
    let args = [path_arg("source", &src)];
    assert_eq!(c.fill(&args, &env), "VAL=3\n");
    (c, env, args)
}

/// The driver's folders as another host has them (pocl installed there at another time:
/// a package keeps its files' times, not its folders'): the entry still serves, as a
/// store on a shared home must across hosts. A folder of the driver's once counted by its
/// time, and a review found such hosts missing every entry.
#[test]
fn the_drivers_folders_installed_at_another_time_still_serve() {
    let (c, env, args) = filled_on_a_pocl_copy("driver-folders");
    for folder in [
        "driver/share/pocl/include",
        "driver/share/pocl",
        "driver/share",
    ] {
        set_times_back(&c.d.path(folder), 86_400);
    }
    let now = c.as_plain_now(&args, &env);
    assert_eq!(
        (now.out.as_str(), now.served),
        ("VAL=3\n", 1),
        "{:?}",
        now.not_served
    );
}

/// The same change made after the application's context (pocl started) and before its
/// first program, where clshim first sees the environment: pocl looks in the folder the
/// process started with, where a header has appeared, and the build is not served (the
/// third review found it served, VAL=3 for 5).
#[test]
fn pocls_cache_folder_named_anew_before_the_first_program() {
    named_before_the_first_program("pocl-folder-context", None, &["kc-plain", "kc-cache"]);
}

/// The same under `LD_PRELOAD` alone (`--mode preload`), where no loader's layer starts
/// before pocl: clshim's first call is the first program, after the change. The build was
/// recorded as pocl's own cache's (nothing fresh in the folder named now: pocl compiled in
/// the one it started with), and a kept compile would have been unpacked where pocl never
/// looks and the build recorded as the store's.
#[test]
fn pocls_cache_folder_named_anew_before_the_first_program_under_preload_alone() {
    named_before_the_first_program_in(
        "preload",
        "pocl-folder-context-preload",
        None,
        &["kc-plain", "kc-cache"],
    );
}

/// Three folders: the process starts with one, names a second before its first OpenCL
/// call (pocl starts there), and a third between its context and its first program. A
/// header in the second is read first without clshim; under the loader's layer, which
/// starts before pocl, the build is not served (the fourth review found it served).
#[test]
fn pocls_cache_folder_named_before_opencl_and_again_before_the_first_program() {
    named_before_the_first_program("pocl-folder-three", Some("kc-first"), &["kc-first"]);
}

/// key_client names pocl's cache folder `kc-late` between its context and its first
/// program (and `first`, with one, before its first OpenCL call); its build (VAL=3 from
/// `hdr/val.h`) is neither kept nor taken (clshim cannot tell which folder pocl compiles
/// in), so a warm step has nothing to make and no build is served; then a `val.h` of VAL 5
/// appears in each of `headers_in`, and the run prints what a build without clshim prints,
/// 5, served nothing.
fn named_before_the_first_program(tag: &str, first: Option<&str>, headers_in: &[&str]) {
    named_before_the_first_program_in("both", tag, first, headers_in);
}

/// [`named_before_the_first_program`] with the runs under the cache in `clshim run --mode
/// mode`.
fn named_before_the_first_program_in(
    mode: &'static str,
    tag: &str,
    first: Option<&str>,
    headers_in: &[&str],
) {
    let c = Case {
        mode,
        ..Case::new(tag)
    };
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    c.write("app/hdr/val.h", b"#define VAL 3\n");
    std::fs::create_dir_all(c.d.path("kc-late")).unwrap();
    let mut args = vec![path_arg("source", &src), OsString::from("--options=-I hdr")];
    if let Some(first) = first {
        args.push(OsString::from(format!(
            "--start-env=POCL_CACHE_DIR={}",
            s(&c.d.path(first))
        )));
    }
    args.push(OsString::from(format!(
        "--context-then-env=POCL_CACHE_DIR={}",
        s(&c.d.path("kc-late"))
    )));
    assert_eq!(c.run(false, &args, &[]).out, "VAL=3\n");
    let cold = c.run(true, &args, &[]);
    assert_eq!(cold.out, "VAL=3\n");
    assert!(cold.shared.is_empty(), "{:?}", cold.shared);
    let log = c.warm();
    assert!(log.contains("nothing to make"), "{log}");
    let again = c.run(true, &args, &[]);
    assert_eq!((again.out.as_str(), again.served), ("VAL=3\n", 0));
    for kc in headers_in {
        c.write(&format!("{kc}/val.h"), b"#define VAL 5\n");
    }
    let now = c.as_plain_now(&args, &[]);
    assert_eq!(
        (now.out.as_str(), now.served),
        ("VAL=5\n", 0),
        "{:?}",
        now.not_served
    );
}

// Builds that hold the moment or the place of their compile.

/// `__TIME__`, `__DATE__`, `__TIMESTAMP__` (also through token pasting) and `__FILE__`
/// (pocl's temporary copy of the source, another name at every build) make a build no
/// entry can stand for: the warm step says why, keeps an entry that says so, and no run
/// is served it or asks for it again.
#[test]
fn a_build_that_holds_its_time_or_place_is_never_served() {
    for (tag, use_it) in [
        ("time", &b"constant char t[] = __TIME__;\n"[..]),
        ("date", b"constant char t[] = __DATE__;\n"),
        ("timestamp", b"constant char t[] = __TIMESTAMP__;\n"),
        (
            "pasted",
            b"#define CAT(a, b) a##b\nconstant char t[] = CAT(__TI, ME__);\n",
        ),
        ("file", b"constant char t[] = __FILE__;\n"),
    ] {
        let c = Case::new(&format!("moment-{tag}"));
        let text = [
            use_it,
            b"__kernel void val(__global int *out) { out[0] = t[0] != 0; }\n",
        ]
        .concat();
        let src = c.write("src.cl", &text);
        let args = [path_arg("source", &src)];
        let plain = c.run(false, &args, &[]).out;
        assert_eq!(plain, "VAL=1\n", "{tag}");
        c.run(true, &args, &[]);
        let log = c.warm();
        assert!(log.contains("not kept"), "{tag}: {log}");
        let again = c.run(true, &args, &[]);
        assert_eq!(again.out, plain, "{tag}");
        assert_eq!(again.served, 0, "{tag}: never served");
        assert!(
            requests(&c.store()).is_empty(),
            "{tag}: not asked for again while its files stay"
        );
    }
}

// Where the application runs.

/// A job in another folder is served where its compile would read the same files (a
/// relative `-I`), and not where those files differ.
#[test]
fn a_job_in_another_folder_is_served_where_it_reads_the_same_files() {
    let c = Case::new("folders");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    c.write("app/inc/val.h", b"#define VAL 1\n");
    c.write("same/inc/val.h", b"#define VAL 1\n");
    c.write("other/inc/val.h", b"#define VAL 2\n");
    let args = [path_arg("source", &src), OsString::from("--options=-I inc")];
    assert_eq!(c.fill(&args, &[]), "VAL=1\n");
    let same = c.run_in(&c.d.path("same"), true, &args, &[]);
    assert_eq!((same.out.as_str(), same.served), ("VAL=1\n", 1));
    let other = c.run_in(&c.d.path("other"), true, &args, &[]);
    assert_eq!((other.out.as_str(), other.served), ("VAL=2\n", 0));
}

/// A kept compile whose job's folder is gone (a job's scratch, removed at its end) is made
/// in an empty folder when its build reads nothing relative to its folder, and served
/// wherever the names it probed there are absent; one whose build needs files from there
/// fails in the warm step, with a note, and is set aside (not made again at every step)
/// while a later job in a folder that has the files is served its kept compile. Before,
/// every later warm step exited 1 on it and left it.
#[test]
fn a_request_whose_folder_is_gone() {
    let c = Case::new("gone");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    c.write("hdr/val.h", b"#define VAL 1\n");
    let absolute = [
        path_arg("source", &src),
        arg("options", format!("-I {}", s(&c.d.path("hdr"))).as_bytes()),
    ];
    let scratch_a = c.d.path("job-a");
    std::fs::create_dir_all(&scratch_a).unwrap();
    assert_eq!(c.run_in(&scratch_a, true, &absolute, &[]).out, "VAL=1\n");
    std::fs::remove_dir_all(&scratch_a).unwrap();
    let log = c.warm();
    assert!(
        log.contains("is gone") && log.contains(": 1 made,"),
        "{log}"
    );
    let elsewhere = c.run_in(&c.app, true, &absolute, &[]);
    assert_eq!(
        (elsewhere.out.as_str(), elsewhere.served),
        ("VAL=1\n", 1),
        "{log}"
    );

    let relative = [path_arg("source", &src), OsString::from("--options=-I inc")];
    let scratch_b = c.d.path("job-b");
    c.write("job-b/inc/val.h", b"#define VAL 5\n");
    assert_eq!(c.run_in(&scratch_b, true, &relative, &[]).out, "VAL=5\n");
    std::fs::remove_dir_all(&scratch_b).unwrap();
    let log = c.warm();
    assert!(
        log.contains("is gone") && log.contains(" 1 failed,"),
        "{log}"
    );
    assert!(
        requests(&c.store()).is_empty(),
        "removed with a note: {log}"
    );
    // The kept compile is set aside (for a week), not made again at every step.
    assert!(c.warm().contains("nothing to make"));
    // A later job, in a folder that has the file, takes the kept compile (pocl finds it its
    // own: the same header text), and prints what a build of its own would.
    c.write("job-c/inc/val.h", b"#define VAL 5\n");
    let scratch_c = c.d.path("job-c");
    let taken = c.run_in(&scratch_c, true, &relative, &[]);
    assert_eq!(taken.out, "VAL=5\n");
    assert!(!taken.stderr.contains("compiled"), "{}", taken.stderr);
}

// The warm step's own race.

/// Waits, on a thread, for the first time any process opens `path`, then (a moment later,
/// once the opener has likely read it) writes `bytes` to it: the same file, with another
/// status.
fn rewrite_at_first_open(path: &Path, bytes: &'static [u8]) -> std::thread::JoinHandle<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: plain inotify calls on a valid name.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: as above.
    let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN) };
    assert!(wd >= 0);
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // SAFETY: `buf` is writable for its length; blocks until an event.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        assert!(n > 0);
        std::thread::sleep(std::time::Duration::from_millis(200));
        std::fs::write(&path, bytes).unwrap();
        // SAFETY: the descriptor made above.
        unsafe { libc::close(fd) };
    })
}

/// A header edited while the warm step compiles (here: the moment the compile opens it)
/// never stands under a manifest of the other text: whichever text is on disk afterwards,
/// a run under the cache prints what a run without clshim prints.
#[test]
fn a_header_edited_while_the_warm_step_compiles() {
    let c = Case::new("race");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    let val = c.write("app/hdr/val.h", b"#define VAL 1\n");
    let args = [path_arg("source", &src), OsString::from("--options=-I hdr")];
    assert_eq!(c.run(false, &args, &[]).out, "VAL=1\n");
    c.run(true, &args, &[]);
    let watcher = rewrite_at_first_open(&val, b"#define VAL 22\n");
    let log = c.warm();
    watcher.join().unwrap();
    let now = c.as_plain_now(&args, &[]);
    assert_eq!(now.out, "VAL=22\n", "{log}");
    write_at(&val, b"#define VAL 1\n");
    let back = c.as_plain_now(&args, &[]);
    assert_eq!(back.out, "VAL=1\n", "{log}");
}

// What a lookup costs.

/// A lookup's cost grows with the files the compile read, never with what the compile
/// skipped or options repeated: a header holding a macro chain of 2^17 tokens under `#if
/// 0` (a hand-written expander took 34 s and 528 MB over one), found through the same
/// `-I` given 60 times (it was read 60 times), costs the cold run no more than its build,
/// and the served run opens it once.
#[test]
fn a_lookup_reads_each_file_once_and_expands_nothing() {
    if !needs(&[STRACE]) {
        return;
    }
    let c = Case::new("cost");
    let src = c.write("src.cl", &source(b"#include \"big.h\"\n"));
    let mut big = b"#define M0 a\n".to_vec();
    for i in 1..=17 {
        big.extend_from_slice(format!("#define M{i} M{} M{}\n", i - 1, i - 1).as_bytes());
    }
    big.extend_from_slice(b"#if 0\n#include M2S(M17)\n#endif\n#define VAL 1\n");
    c.write("app/hdr/big.h", &big);
    let options = [M2S, &b" -I hdr".repeat(60)].concat();
    let args = [path_arg("source", &src), arg("options", &options)];
    let started = std::time::Instant::now();
    let plain = c.run(false, &args, &[]);
    let plain_time = started.elapsed();
    let started = std::time::Instant::now();
    let cold = c.run(true, &args, &[]);
    let cold_time = started.elapsed();
    assert_eq!(cold.out, plain.out);
    assert!(
        cold_time < plain_time + std::time::Duration::from_secs(5),
        "a cold run under the cache took {cold_time:?}, without clshim {plain_time:?}"
    );
    c.warm();
    let trace = c.d.path("strace");
    let traces = c.d.path("traces-strace");
    let mut cmd = std::process::Command::new("strace");
    cmd.args(["-f", "-qq", "-o", s(&trace), "-e", "trace=open,openat"])
        .arg(env!("CARGO_BIN_EXE_clshim"))
        .args([
            "run",
            "--lib",
            s(&shim_path()),
            "--program-cache",
            "--trace-dir",
        ])
        .arg(&traces)
        .arg("--")
        .arg(&c.bin)
        .args(&args)
        .current_dir(&c.app);
    clear_shim_env(&mut cmd, &[]);
    cmd.env("POCL_CACHE_DIR", c.d.path("kc-cache"))
        .env("CLSHIM_NATIVE_STORE", c.store());
    let out = cmd.output().unwrap();
    assert_eq!(stdout(&out), plain.out, "{}", stderr(&out));
    let served = checked_traces(&traces)
        .iter()
        .filter(|r| r["event"] == "build" && r["served"] == "store")
        .count();
    assert_eq!(served, 1, "{}", stderr(&out));
    let opens = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("big.h"))
        .count();
    assert_eq!(opens, 1, "the served run opens the header once");
}

// Content hashes.

/// Two headers of one length and one FNV-1a 64 hash (0xcf7042e7588ebb7b), found by a
/// birthday search of some CPU minutes: one says VAL 1, the other VAL 2. A key that held
/// a header's content by that hash served the first's build for the second; the manifest
/// holds SHA-256.
#[test]
fn headers_with_one_fnv_hash_are_two_builds() {
    let first = b"#define VAL 1\n//b01b0e35a91385fc\n";
    let second = b"#define VAL 2\n//be53d3564dc7f365\n";
    assert_eq!(first.len(), second.len());
    assert_eq!(fnv1a64_u64(first), fnv1a64_u64(second));
    let c = Case::new("fnv-collision");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    let val = c.write("app/hdr/val.h", first);
    let args = [path_arg("source", &src), OsString::from("--options=-I hdr")];
    assert_eq!(c.fill(&args, &[]), "VAL=1\n");
    write_at(&val, second);
    let now = c.as_plain_now(&args, &[]);
    assert_eq!((now.out.as_str(), now.served), ("VAL=2\n", 0));
}

// The warm step's bounds.

/// A build that blocks in the warm step (its header became a FIFO since the run that asked
/// for it) is ended after the step's time limit: its request is set aside and named, and
/// the step returns. Before, the worker, and its claim, waited forever.
#[test]
fn a_build_that_blocks_is_ended_at_the_time_limit() {
    let c = Case::new("blocks");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    let val = c.write("app/hdr/val.h", b"#define VAL 1\n");
    let args = [path_arg("source", &src), OsString::from("--options=-I hdr")];
    c.run(true, &args, &[]);
    std::fs::remove_file(&val).unwrap();
    let fifo = std::ffi::CString::new(val.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut cmd = clshim();
    cmd.args(["warm", "--store", s(&c.store()), "--lib", s(&shim_path())])
        .args(["--timeout", "3"])
        .current_dir(c.d.path(""));
    clear_shim_env(&mut cmd, &[]);
    cmd.env("HOME", c.d.path("home"))
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if std::time::Instant::now() > until {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let err = {
        use std::io::Read;
        let mut e = String::new();
        child.stderr.take().unwrap().read_to_string(&mut e).unwrap();
        e
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "the step hung or failed: {err}"
    );
    assert!(
        err.contains("took longer than the limit of 3 s") && err.contains("set aside"),
        "{err}"
    );
    assert!(requests(&c.store()).is_empty(), "{err}");
}

// What a run says of the builds it was not served (issue 31).

/// Every source build the store did not serve says why, in its record (`not_served`) and
/// in the exit line, which counts the reasons; only a build that lacks an entry is one the
/// exit line says a warm step makes. Before, build records said nothing, and the exit line
/// said the store "held none of these builds" (for a later warm step to make) where it
/// held entries whose compiles read other files, or that the warm step would never keep.
#[test]
fn a_build_not_served_says_why() {
    let c = Case::new("why-not-served");
    let hdr = c.write("app/hdr/val.h", b"#define VAL 1\n");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    let args = [path_arg("source", &src), arg("options", b"-I hdr")];
    let cold = c.run(true, &args, &[]);
    assert_eq!(cold.not_served, ["no_entry"], "{}", cold.stderr);
    assert!(
        cold.stderr.contains("1 build ")
            && cold.stderr.contains("(1 compiled and kept in the store)"),
        "{}",
        cold.stderr
    );
    assert!(
        !cold.stderr.contains("driver's binary in the store"),
        "{}",
        cold.stderr
    );
    c.warm();
    write_at(&hdr, b"#define VAL 2\n");
    let edited = c.as_plain_now(&args, &[]);
    assert_eq!(edited.not_served, ["files_differ"], "{}", edited.stderr);
    assert!(
        edited.stderr.contains(
            "; 1 of 1 builds could not use the driver's binary in the store: 1 whose \
             entries' compiles read other files (another folder's headers?)"
        ),
        "{}",
        edited.stderr
    );
    let timed = c.write(
        "timed.cl",
        b"constant char t[] = __TIME__;\n__kernel void val(__global int *out) { out[0] = t[0] != 0; }\n",
    );
    let timed = [path_arg("source", &timed)];
    c.run(true, &timed, &[]);
    c.warm();
    let again = c.run(true, &timed, &[]);
    assert_eq!(again.not_served, ["not_kept"], "{}", again.stderr);
    assert!(
        again.stderr.contains(
            "; 1 of 1 builds could not use the driver's binary in the store: 1 not kept: they \
             hold the time of the compile"
        ),
        "{}",
        again.stderr
    );
    assert!(
        !again.stderr.contains("clshim warm makes"),
        "{}",
        again.stderr
    );
    // The warm step made the edited header's build: served (a process that meets the
    // entry without its source's mark, which that step's cap removed, marks it again).
    let served = c.run(true, &args, &[]);
    if served.served == 0 {
        assert!(served.stderr.contains("marked again"), "{}", served.stderr);
    }
    let served = c.run(true, &args, &[]);
    assert_eq!(
        (served.served, served.not_served.len()),
        (1, 0),
        "{}",
        served.stderr
    );
    assert!(
        served
            .stderr
            .contains("(1 from the store (1 as the driver's binary))"),
        "{}",
        served.stderr
    );
}

/// Options as a photo editor passes them, `-I"DIR"`: pocl 3.1 splits the options at
/// whitespace and hands clang each `"` as a space, so the folder searched is ` DIR `
/// (relative, where the application runs) and the header comes from the working directory
/// (pocl's `-I.`). Such a build is kept and served as pocl reads it (the key holds the
/// options byte for byte, the manifest what clang read), and an edit of the header it did
/// read is another build.
#[test]
fn quoted_options_are_kept_as_pocl_reads_them() {
    let c = Case::new("quoted-options");
    let cwd_hdr = c.write("app/val.h", b"#define VAL 3\n");
    let named = c.write("named/val.h", b"#define VAL 8\n");
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    let mut options = b"-I\"".to_vec();
    options.extend_from_slice(named.parent().unwrap().as_os_str().as_bytes());
    options.push(b'"');
    let args = [path_arg("source", &src), arg("options", &options)];
    assert_eq!(c.fill(&args, &[]), "VAL=3\n");
    write_at(&cwd_hdr, b"#define VAL 4\n");
    let now = c.as_plain_now(&args, &[]);
    assert_eq!((now.out.as_str(), now.served), ("VAL=4\n", 0));
    assert_eq!(now.not_served, ["files_differ"]);
}

// What an adversarial review of keeping found (issue 36).

/// An application's pocl kernel cache that others may write (here its folder 0777, not
/// sticky) is no source of what enters the store: a group member's bitcode planted in the
/// program's folder there (a kernel writing 666) must never be copied into an entry. The
/// warm step, making the driver's binary of a compile the application kept from that
/// cache, compiles the build itself instead of taking the planted folder, and a run on a
/// fresh cache is served what pocl alone gives; a run on that cache keeps nothing from it.
/// Before, the warm worker copied the folder without an owner or mode check, and 666 was
/// served.
#[test]
fn a_kernel_cache_others_may_write_is_never_kept_or_copied() {
    let c = Case::new("planted-bitcode");
    let src = c.write("src.cl", &source(b"#define VAL 1\n"));
    let args = [path_arg("source", &src)];
    // The cached run keeps its compile (its request names this cache); then the cache is
    // opened to others and a program of another text (VAL 666) is planted where pocl keeps
    // this one's.
    assert_eq!(c.run(true, &args, &[]).out, "VAL=1\n");
    let kc = c.d.path("kc-cache");
    let planted_src = c.write("planted.cl", &source(b"#define VAL 666\n"));
    let other = c.d.path("kc-other");
    let mut plant = std::process::Command::new(&c.bin);
    plant
        .arg(path_arg("source", &planted_src))
        .env("POCL_CACHE_DIR", &other);
    clear_shim_env(&mut plant, &[]);
    assert!(plant.output().unwrap().status.success());
    // The program's folder in each cache: its bitcode and its first launch's kernel.
    let program_folder = |root: &Path| -> PathBuf {
        let level = std::fs::read_dir(root)
            .unwrap()
            .flatten()
            .find(|e| e.path().is_dir())
            .unwrap()
            .path();
        std::fs::read_dir(level)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path()
    };
    let (from, to) = (program_folder(&other), program_folder(&kc));
    std::fs::copy(from.join("program.bc"), to.join("program.bc")).unwrap();
    let spec = |p: &Path| {
        std::fs::read_dir(p.join("val"))
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path()
    };
    std::fs::copy(spec(&from).join("val.so"), spec(&to).join("val.so")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&kc, std::fs::Permissions::from_mode(0o777)).unwrap();
    let log = c.warm();
    assert!(log.contains(" 1 made,"), "{log}");
    let fresh = [("POCL_CACHE_DIR", s(&c.d.path("kc-fresh")).to_string())];
    let served = c.run(true, &args, &fresh);
    assert_eq!(
        (served.out.as_str(), served.served),
        ("VAL=1\n", 1),
        "{log}"
    );
    // A compile made in that cache is not kept, and its record says why.
    let kept = c.store().join("compiles");
    std::fs::remove_dir_all(&kept).unwrap();
    std::fs::remove_dir_all(c.d.path("kc-cache")).unwrap();
    std::fs::create_dir(&kc).unwrap();
    std::fs::set_permissions(&kc, std::fs::Permissions::from_mode(0o777)).unwrap();
    let other_src = c.write("other.cl", &source(b"#define VAL 3\n"));
    let open = c.run(true, &[path_arg("source", &other_src)], &[]);
    assert_eq!(open.out, "VAL=3\n");
    assert!(
        open.stderr
            .contains("not kept in the store: 1 pocl's cache is not yours alone"),
        "{}",
        open.stderr
    );
    assert_eq!(std::fs::read_dir(&kept).map_or(0, |d| d.count()), 0);
}

/// A header that is a FIFO is read by the compile, and what the pipe delivers can change at
/// every read: such a build is not kept as the driver's binary (the warm step says why),
/// and a later run prints what the pipe delivers then. Before, the FIFO was recorded as
/// "exists" and the old build was served.
#[test]
fn a_header_that_is_a_fifo_is_never_served() {
    let c = Case::new("fifo-header");
    let fifo = c.d.path("app/hdr/val.h");
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    let name = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let src = c.write("src.cl", &source(b"#include \"val.h\"\n"));
    let args = [path_arg("source", &src), arg("options", b"-I hdr")];
    // A writer that feeds the pipe `n` times (each open of it by a compile reads once).
    let feed = |value: u32, times: usize| {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            for _ in 0..times {
                if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&fifo) {
                    use std::io::Write;
                    let _ = writeln!(f, "#define VAL {value}");
                }
            }
        })
    };
    let w = feed(1, 2);
    assert_eq!(c.run(true, &args, &[]).out, "VAL=1\n");
    let w2 = feed(1, 8);
    let log = c.warm();
    assert!(
        log.contains("FIFO or a device") || log.contains("not a regular file"),
        "{log}"
    );
    let _ = (w.join(), std::fs::remove_file(&fifo));
    drop(w2);
    std::fs::write(&fifo, "#define VAL 2\n").unwrap();
    let now = c.run(true, &args, &[]);
    assert_eq!(now.out, "VAL=2\n", "{}", now.stderr);
    assert_eq!(now.served, 0);
}

/// "The driver's own files" are learnt in an environment that adds nothing of the user's:
/// a header force-included through `POCL_EXTRA_BUILD_FLAGS` (`-include` between tabs) is a
/// file of the build, checked by its content, never a driver's file checked by its length
/// and time alone. A same-length edit with its time kept (`cp -p`, `rsync -a`) is another
/// build. Before, it was served the old one.
#[test]
fn a_header_forced_in_by_the_drivers_flags_is_no_driver_file() {
    let c = Case::new("forced-cfg");
    let cfg = c.write("cfg/cfg.h", b"#define VAL 1\n");
    let src = c.write("src.cl", KERNEL);
    let flags = format!("-DX=1\t-include\t{}", s(&cfg));
    let env = [("POCL_EXTRA_BUILD_FLAGS", flags)];
    let args = [path_arg("source", &src)];
    assert_eq!(c.run(true, &args, &env).out, "VAL=1\n");
    let log = c.warm();
    assert!(log.contains(" 1 made,"), "{log}");
    assert_eq!(c.run(true, &args, &env).served, 1);
    // The same length, the same modification time.
    let before = std::fs::metadata(&cfg).unwrap().modified().unwrap();
    std::fs::write(&cfg, b"#define VAL 7\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&cfg)
        .unwrap()
        .set_modified(before)
        .unwrap();
    let edited = c.as_plain_now(&args, &env);
    assert_eq!(edited.out, "VAL=7\n");
    assert_eq!(edited.served, 0);
}

// What the adversarial review of kept compiles found (pocl's cache folders between the
// cache and what is kept).

/// The program folder, relative to pocl's cache `root`, of the one program built there.
fn program_folder_in(root: &Path) -> PathBuf {
    let level = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .find(|e| e.path().is_dir())
        .unwrap();
    let program = std::fs::read_dir(level.path())
        .unwrap()
        .flatten()
        .next()
        .unwrap();
    Path::new(&level.file_name()).join(program.file_name())
}

/// Plants, in the pocl kernel cache `kc` (made here with `mode`), another user's folders of
/// the program `src` would build (its level folder and program folder, uid 65534, 0777),
/// holding the bitcode of `planted` (VAL 666), without a kernel for its launch: the
/// application's own pocl then serves that bitcode, and compiles its kernel at the first
/// launch into folders of the application's user. False where the test cannot give files to
/// another user (not root).
fn plant_other_users_program(c: &Case, kc: &Path, mode: u32, src: &Path, planted: &Path) -> bool {
    let learn = |s: &Path, kc: &Path| -> PathBuf {
        let mut run = std::process::Command::new(&c.bin);
        run.arg(path_arg("source", s)).env("POCL_CACHE_DIR", kc);
        clear_shim_env(&mut run, &[]);
        assert!(run.output().unwrap().status.success());
        program_folder_in(kc)
    };
    let (ours, theirs) = (c.d.path("kc-learn-ours"), c.d.path("kc-learn-theirs"));
    let rel = learn(src, &ours);
    let planted_rel = learn(planted, &theirs);
    std::fs::create_dir_all(kc).unwrap();
    chmod(kc, mode);
    let level = kc.join(rel.parent().unwrap());
    let program = kc.join(&rel);
    std::fs::create_dir_all(&program).unwrap();
    let bc = program.join("program.bc");
    std::fs::copy(theirs.join(&planted_rel).join("program.bc"), &bc).unwrap();
    for (p, m) in [(&level, 0o777), (&program, 0o777), (&bc, 0o666)] {
        if !give_to_nobody(p) {
            return false;
        }
        chmod(p, m);
    }
    true
}

/// A pocl kernel cache that others may add to but not rename in (sticky and writable by
/// all, as `/tmp` is, or a group's sticky project folder) passed as one no one else can
/// write: another user's level folder and program folder there, holding their bitcode for
/// this program, made the application's pocl compile their kernel at the first launch
/// (pocl's own doing, with clshim or without), into folders of the user's own below theirs,
/// and clshim kept that kernel in the store. A later job on a fresh, private cache, which
/// compiles the right program, then took the planted kernel with its first launch and
/// printed 666 where pocl alone prints 1. Every folder from pocl's cache down to what is
/// kept must be the user's alone: nothing from there enters the store now.
#[test]
fn a_kernel_made_below_another_users_folder_of_a_sticky_cache_is_never_kept() {
    let c = Case::new("sticky-cache");
    let src = c.write("src.cl", &source(b"#define VAL 1\n"));
    let planted = c.write("planted.cl", &source(b"#define VAL 666\n"));
    let args = [path_arg("source", &src)];
    let sticky = c.d.path("kc-sticky");
    if !plant_other_users_program(&c, &sticky, 0o1777, &src, &planted) {
        return;
    }
    let (tmp_a, tmp_b) = (c.d.path("tmp-a"), c.d.path("tmp-b"));
    std::fs::create_dir_all(&tmp_a).unwrap();
    std::fs::create_dir_all(&tmp_b).unwrap();
    let on_sticky = [
        ("POCL_CACHE_DIR", s(&sticky).to_string()),
        ("TMPDIR", s(&tmp_a).to_string()),
    ];
    // pocl serves what is in its cache, as it does without clshim.
    assert_eq!(c.run(true, &args, &on_sticky).out, "VAL=666\n");
    let kept: Vec<PathBuf> = std::fs::read_dir(c.store().join("compiles"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|e| store_files(&e.path(), ".kc"))
        .collect();
    assert!(kept.is_empty(), "kept from that cache: {kept:?}");
    // A later job on another node (a fresh cache and temporary folder of its own).
    assert_eq!(c.run(false, &args, &[]).out, "VAL=1\n");
    let later = c.run(
        true,
        &args,
        &[
            ("POCL_CACHE_DIR", s(&c.d.path("kc-fresh")).to_string()),
            ("TMPDIR", s(&tmp_b).to_string()),
        ],
    );
    assert_eq!(later.out, "VAL=1\n", "{}", later.stderr);
}

/// A rank whose pocl kernel cache others may write (0777) keeps nothing in the store, but
/// published to its node's peers what it made there all the same: the kernel its pocl
/// compiled from another user's bitcode planted in the cache reached a peer with a
/// private cache of its own, which printed 666 where pocl alone prints 1. A rank publishes
/// only from a cache whose folders, from `/` down to what it publishes, no one else can
/// have written.
#[test]
fn a_rank_publishes_nothing_from_a_kernel_cache_others_may_write() {
    let c = Case::new("open-cache-peers");
    let src = c.write("src.cl", &source(b"#define VAL 1\n"));
    let planted = c.write("planted.cl", &source(b"#define VAL 666\n"));
    let args = [path_arg("source", &src)];
    let open = c.d.path("kc-open");
    if !plant_other_users_program(&c, &open, 0o777, &src, &planted) {
        return;
    }
    // Both ranks on one node: the same temporary folder.
    let tmp = c.d.path("tmp-node");
    std::fs::create_dir_all(&tmp).unwrap();
    let rank = |kc: &Path| {
        [
            ("POCL_CACHE_DIR", s(kc).to_string()),
            ("TMPDIR", s(&tmp).to_string()),
        ]
    };
    assert_eq!(c.run(true, &args, &rank(&open)).out, "VAL=666\n");
    assert_eq!(c.run(false, &args, &[]).out, "VAL=1\n");
    let peer = c.run(true, &args, &rank(&c.d.path("kc-peer")));
    assert_eq!(peer.out, "VAL=1\n", "{}", peer.stderr);
}

/// A pocl kernel cache that ranks share (pocl's default, `~/.cache/pocl/kcache`, when a job
/// gives its ranks none of their own), in which another rank compiles other programs while
/// this one builds: a build that took the store's kept compile, which pocl found (a cache
/// hit), was taken for a compile of its own because folders were made in the cache
/// meanwhile. Its record said `compiled`, and it replaced the kept build with the other
/// rank's programs, so a later job on a fresh node compiled it again. Whether pocl used
/// what was taken is now told by pocl's own mark of a hit on it (the time of its
/// `last_accessed`), not by whatever else appeared in the cache.
#[test]
fn a_build_taken_from_the_store_in_a_cache_others_compile_in_is_no_compile() {
    let c = Case::new("busy-shared-cache");
    let src = c.write("src.cl", &source(b"#define VAL 1\n"));
    let args = [path_arg("source", &src)];
    assert_eq!(c.run(true, &args, &[]).shared, ["compiled"]);
    let shared_cache = c.d.path("kc-shared");
    std::fs::create_dir_all(&shared_cache).unwrap();
    // Another rank, compiling one program after another into the shared cache.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (stop, root) = (stop.clone(), shared_cache.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let p = root.join("ZZ").join(format!("OTHERPROGRAM{i}"));
                std::fs::create_dir_all(&p).unwrap();
                std::fs::write(p.join("program.bc"), b"another rank's").unwrap();
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let tmp = |n: &str| {
        let t = c.d.path(n);
        std::fs::create_dir_all(&t).unwrap();
        ("TMPDIR", s(&t).to_string())
    };
    let busy = c.run(
        true,
        &args,
        &[
            ("POCL_CACHE_DIR", s(&shared_cache).to_string()),
            tmp("tmp-busy"),
        ],
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    other.join().unwrap();
    assert_eq!(busy.out, "VAL=1\n");
    assert_eq!(busy.shared, ["from_store"], "{}", busy.stderr);
    let later = c.run(
        true,
        &args,
        &[
            ("POCL_CACHE_DIR", s(&c.d.path("kc-later")).to_string()),
            tmp("tmp-later"),
        ],
    );
    assert_eq!(later.shared, ["from_store"], "{}", later.stderr);
}

/// A kept build whose file does not hold (here cut to nothing, as a node that crashed after
/// the rename but before its data reached the disk leaves it; the store's writes are not
/// synced) is never taken, rightly; but the build that compiled instead kept nothing (a
/// file by that name was there), and every read of the damaged file set its time to now,
/// so the cap, least recently used first, never took it either: the build compiled in every
/// later job. A build that found its kept compile refused now replaces it, and only a kept
/// compile that holds counts as used.
#[test]
fn a_damaged_kept_build_is_replaced_by_the_next_compile() {
    let c = Case::new("damaged-kept");
    let src = c.write("src.cl", &source(b"#define VAL 1\n"));
    let args = [path_arg("source", &src)];
    assert_eq!(c.run(true, &args, &[]).shared, ["compiled"]);
    let build = std::fs::read_dir(c.store().join("compiles"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("build.kc"))
        .find(|p| p.exists())
        .expect("a kept build");
    std::fs::write(&build, b"").unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options()
        .write(true)
        .open(&build)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let fresh = |n: &str| {
        let t = c.d.path(&format!("tmp-{n}"));
        std::fs::create_dir_all(&t).unwrap();
        [
            (
                "POCL_CACHE_DIR",
                s(&c.d.path(&format!("kc-{n}"))).to_string(),
            ),
            ("TMPDIR", s(&t).to_string()),
        ]
    };
    let next = c.run(true, &args, &fresh("next"));
    assert_eq!(
        (next.out.as_str(), &next.shared[..]),
        ("VAL=1\n", &["compiled".to_string()][..])
    );
    let later = c.run(true, &args, &fresh("later"));
    assert_eq!(later.shared, ["from_store"], "{}", later.stderr);
}
