//! The native store serves a build only from an entry made for exactly that build
//! (docs/binary-policies.md, "What the key holds"): a client with its own binary cache
//! (tests/c/header_client.c) whose kernel writes VAL from a header on disk or from the
//! driver's environment gives, loading under `substitute` with the store, exactly what it
//! gives without clshim and with the store off, when a header was edited, a relative
//! include path resolves elsewhere, the driver's environment defines VAL, a header
//! appears in a directory searched earlier, the options name a file pocl refuses, the
//! device is another, or the driver library is another build; and an include named by
//! macros (hashcat's way) is followed, stored and keyed like a quoted one. The first three are the
//! findings of issue 24, which gave stale code before the key held what the compiler
//! reads.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn client() -> PathBuf {
    build_c("header_client", &[])
}

/// How a client run is made.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Under {
    /// No clshim.
    Plain,
    /// `substitute` with the native store off.
    StoreOff,
    /// `substitute` with the test's store, leaving requests.
    Store,
}

struct Case {
    d: Scratch,
    bin: PathBuf,
    store: PathBuf,
}

impl Case {
    fn new(tag: &str) -> Case {
        let d = scratch(tag);
        let store = d.path("store");
        Case {
            bin: client(),
            store,
            d,
        }
    }

    fn dir(&self, name: &str) -> PathBuf {
        let p = self.d.path(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// Runs the client in `cwd` with `args` and `env` (plus its own pocl kernel cache per
    /// way of running, so no way serves another); returns its output and, under clshim,
    /// its records.
    fn run(
        &self,
        under: Under,
        cwd: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> (String, Vec<Value>) {
        let traces = self.d.path(&format!("traces-{}", self.next()));
        let mut cmd = std::process::Command::new(&self.bin);
        cmd.args(args).current_dir(cwd);
        clear_shim_env(&mut cmd, &[]);
        cmd.env("POCL_CACHE_DIR", self.d.path(&format!("kc-{under:?}")));
        let shim = under != Under::Plain;
        if shim {
            cmd.env("CLSHIM_BINARIES", "substitute")
                .env("CLSHIM_TRACE_DIR", &traces);
            if under == Under::Store {
                cmd.env("CLSHIM_NATIVE_STORE", &self.store)
                    .env("CLSHIM_WARM_SERVICE", "0");
            } else {
                cmd.env("CLSHIM_NATIVE_STORE", "off");
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = run(cmd, shim);
        assert!(out.status.success(), "{args:?} {under:?}: {}", stderr(&out));
        let records = if traces.exists() {
            checked_traces(&traces)
        } else {
            Vec::new()
        };
        (stdout(&out), records)
    }

    fn next(&self) -> usize {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// `clshim warm` on the store, from `cwd` with `env`.
    fn warm(&self, cwd: &Path, env: &[(&str, &str)]) -> String {
        let mut c = clshim();
        c.args(["warm", "--store", s(&self.store), "--lib", s(&shim_path())])
            .current_dir(cwd);
        clear_shim_env(&mut c, &[]);
        c.env_remove("POCL_EXTRA_BUILD_FLAGS");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "clshim warm: {}", stderr(&out));
        stderr(&out)
    }

    /// Fills a cache named `cache` the way `under` does (a build from source, its binary
    /// saved) and loads it again in a new process; returns what the load printed.
    fn save_then_load(
        &self,
        under: Under,
        cwd: &Path,
        cache: &str,
        options: &str,
        env: &[(&str, &str)],
    ) -> (String, Vec<Value>) {
        let file = self.d.path(cache);
        let opts = format!("--options={options}");
        let saved = self.run(
            under,
            cwd,
            &[format!("--save={}", s(&file)), opts.clone()],
            env,
        );
        if saved.0.starts_with("build: ") {
            // The build failed: there is nothing to load.
            return saved;
        }
        self.run(under, cwd, &[format!("--load={}", s(&file)), opts], env)
    }
}

fn made_from(records: &[Value]) -> String {
    records
        .iter()
        .find(|r| r["event"] == "binary_load")
        .map(|r| r["made_from"].as_str().unwrap_or("-").to_string())
        .unwrap_or_default()
}

/// What a load gives without clshim and with the store off, which must be equal: the
/// expected output of a load under the store.
fn expected(c: &Case, cwd: &Path, options: &str, env: &[(&str, &str)]) -> String {
    let n = c.next();
    let (plain, _) = c.save_then_load(Under::Plain, cwd, &format!("plain{n}"), options, env);
    let (off, _) = c.save_then_load(Under::StoreOff, cwd, &format!("off{n}"), options, env);
    assert_eq!(plain, off, "without clshim and with the store off");
    plain
}

/// A header included from disk (`-I DIR`, `#include "val.h"`) is edited after an entry
/// was made for the old one; a second cache (a new version of the application) filled
/// afterwards loads the new value, and a warm step then makes the new build's entry,
/// which the next load takes.
#[test]
fn an_edited_header_is_another_build() {
    let c = Case::new("keys-edited");
    let hdr = c.dir("hdr");
    let app = c.dir("app");
    std::fs::write(hdr.join("val.h"), "#define VAL 1\n").unwrap();
    let opts = format!("-I {}", s(&hdr));
    let (first, _) = c.save_then_load(Under::Store, &app, "first.bin", &opts, &[]);
    assert_eq!(first, "VAL=1\n");
    c.warm(&c.d.path(""), &[]);
    std::fs::write(hdr.join("val.h"), "#define VAL 2\n").unwrap();
    let want = expected(&c, &app, &opts, &[]);
    assert_eq!(want, "VAL=2\n");
    let (got, records) = c.save_then_load(Under::Store, &app, "second.bin", &opts, &[]);
    assert_eq!(got, want, "the edited header's value");
    assert_eq!(made_from(&records), "recipe");
    c.warm(&c.d.path(""), &[]);
    let (again, records) = c.run(
        Under::Store,
        &app,
        &[
            format!("--load={}", s(&c.d.path("second.bin"))),
            format!("--options={opts}"),
        ],
        &[],
    );
    assert_eq!(again, want);
    assert_eq!(made_from(&records), "native", "the new build's own entry");
}

/// An include named by macros, as hashcat names every one (`#include
/// M2S(INCLUDE_PATH/val.h)` with `-D INCLUDE_PATH=DIR` and the stringifying macros among
/// the options), is followed: its build is stored and served, and an edit of the header
/// it names is another build, as for a quoted name. Before the macros were expanded such
/// a build was never stored (hashcat's warm runs built everything again).
#[test]
fn an_include_named_by_macros_is_followed() {
    let c = Case::new("keys-macro");
    let hdr = c.dir("hdr");
    let app = c.dir("app");
    std::fs::write(hdr.join("val.h"), "#define VAL 5\n").unwrap();
    let opts = format!(
        "-D XM2S(x)=#x -D M2S(x)=XM2S(x) -D INCLUDE_PATH={}",
        s(&hdr)
    );
    let macro_run = |under: Under, args: &[String]| {
        let mut a = args.to_vec();
        a.push("--macro-include".into());
        c.run(under, &app, &a, &[])
    };
    let save = |under: Under, file: &str| {
        let file = c.d.path(file);
        let opt = format!("--options={opts}");
        macro_run(under, &[format!("--save={}", s(&file)), opt.clone()]);
        macro_run(under, &[format!("--load={}", s(&file)), opt])
    };
    assert_eq!(save(Under::Plain, "plain5.bin").0, "VAL=5\n");
    assert_eq!(save(Under::Store, "first.bin").0, "VAL=5\n");
    c.warm(&c.d.path(""), &[]);
    let (warm, records) = save(Under::Store, "first.bin");
    assert_eq!(warm, "VAL=5\n");
    assert_eq!(
        made_from(&records),
        "native",
        "the build is stored and served"
    );
    std::fs::write(hdr.join("val.h"), "#define VAL 6\n").unwrap();
    assert_eq!(save(Under::Plain, "plain6.bin").0, "VAL=6\n");
    let (edited, records) = save(Under::Store, "second.bin");
    assert_eq!(
        edited, "VAL=6\n",
        "the edited header's value, not the stored build's"
    );
    assert_eq!(made_from(&records), "recipe");
}

/// A relative include path (`-I inc`) resolves against the application's working
/// directory; a warm step started elsewhere, where `inc/val.h` says otherwise, makes the
/// application's build, not its own folder's.
#[test]
fn a_relative_include_path_resolves_where_the_application_ran() {
    let c = Case::new("keys-relative");
    let app = c.dir("app");
    let other = c.dir("other");
    for (dir, v) in [(&app, 3), (&other, 4)] {
        std::fs::create_dir_all(dir.join("inc")).unwrap();
        std::fs::write(dir.join("inc/val.h"), format!("#define VAL {v}\n")).unwrap();
    }
    let want = expected(&c, &app, "-I inc", &[]);
    assert_eq!(want, "VAL=3\n");
    c.save_then_load(Under::Store, &app, "cache.bin", "-I inc", &[]);
    c.warm(&other, &[]);
    let (got, records) = c.run(
        Under::Store,
        &app,
        &[
            format!("--load={}", s(&c.d.path("cache.bin"))),
            "--options=-I inc".into(),
        ],
        &[],
    );
    assert_eq!(got, want);
    assert_eq!(made_from(&records), "native");
}

/// The driver reads its environment while compiling (`POCL_EXTRA_BUILD_FLAGS`): a warm
/// step started without it makes the build the application made with it, and a load in
/// another environment is another build.
#[test]
fn the_drivers_environment_is_part_of_the_build() {
    let c = Case::new("keys-env");
    let (hdr, app) = (c.dir("hdr"), c.dir("app"));
    std::fs::write(hdr.join("val.h"), "\n").unwrap();
    let opts = format!("-I {}", s(&hdr));
    let flags = [("POCL_EXTRA_BUILD_FLAGS", "-DVAL=7")];
    let want = expected(&c, &app, &opts, &flags);
    assert_eq!(want, "VAL=7\n");
    c.save_then_load(Under::Store, &app, "cache.bin", &opts, &flags);
    c.warm(&c.d.path(""), &[]);
    let load = [
        format!("--load={}", s(&c.d.path("cache.bin"))),
        format!("--options={opts}"),
    ];
    let (got, records) = c.run(Under::Store, &app, &load, &flags);
    assert_eq!(got, want);
    assert_eq!(made_from(&records), "native");
    // Another value of the variable is another build: no entry, made from its recipe.
    let (other, records) = c.run(
        Under::Store,
        &app,
        &load,
        &[("POCL_EXTRA_BUILD_FLAGS", "-DVAL=8")],
    );
    assert_eq!(other, "VAL=8\n");
    assert_eq!(made_from(&records), "recipe");
}

/// A header that appears in a directory searched before the one the entry's build found
/// it in (`-I A -I B`, then `A/val.h`) is another build.
#[test]
fn a_header_found_earlier_on_the_path_is_another_build() {
    let c = Case::new("keys-earlier");
    let (a, b, app) = (c.dir("a"), c.dir("b"), c.dir("app"));
    std::fs::write(b.join("val.h"), "#define VAL 5\n").unwrap();
    let opts = format!("-I {} -I {}", s(&a), s(&b));
    c.save_then_load(Under::Store, &app, "first.bin", &opts, &[]);
    c.warm(&c.d.path(""), &[]);
    std::fs::write(a.join("val.h"), "#define VAL 6\n").unwrap();
    let want = expected(&c, &app, &opts, &[]);
    assert_eq!(want, "VAL=6\n");
    let (got, records) = c.save_then_load(Under::Store, &app, "second.bin", &opts, &[]);
    assert_eq!(got, want);
    assert_eq!(made_from(&records), "recipe");
}

/// Options naming a file pocl does not take (`-include FILE`) fail the same way under the
/// store as without clshim.
#[test]
fn an_include_option_pocl_refuses_fails_alike() {
    let c = Case::new("keys-include-option");
    let app = c.dir("app");
    std::fs::write(app.join("val.h"), "#define VAL 9\n").unwrap();
    let opts = format!("-include {}", s(&app.join("val.h")));
    let want = expected(&c, &app, &opts, &[]);
    assert!(want.starts_with("build: "), "{want}");
    let (got, _) = c.save_then_load(Under::Store, &app, "cache.bin", &opts, &[]);
    assert_eq!(got, want);
}

/// A cache filled on one pocl device and loaded on another (pocl's `basic` device beside
/// its default `pthread` one) gives the same refusal as without clshim, entry or not.
#[test]
fn another_device_is_another_build() {
    let c = Case::new("keys-device");
    let app = c.dir("app");
    std::fs::write(app.join("val.h"), "#define VAL 2\n").unwrap();
    let n = c.next();
    let basic = [("POCL_DEVICES", "basic")];
    let mut outs = Vec::new();
    for under in [Under::Plain, Under::StoreOff, Under::Store] {
        let file = c.d.path(&format!("cache-{under:?}-{n}"));
        c.run(under, &app, &[format!("--save={}", s(&file))], &[]);
        if under == Under::Store {
            c.warm(&c.d.path(""), &[]);
        }
        let mut cmd = std::process::Command::new(&c.bin);
        cmd.arg(format!("--load={}", s(&file))).current_dir(&app);
        clear_shim_env(&mut cmd, &[]);
        cmd.env("POCL_DEVICES", basic[0].1);
        if under != Under::Plain {
            cmd.env("CLSHIM_BINARIES", "substitute").env(
                "CLSHIM_NATIVE_STORE",
                if under == Under::Store {
                    s(&c.store)
                } else {
                    "off"
                },
            );
        }
        let out = run(cmd, under != Under::Plain);
        outs.push((under, out.status.code(), stdout(&out)));
    }
    assert!(
        outs[0].2.contains("CL_INVALID_BINARY"),
        "pocl refuses another device's binary: {outs:?}"
    );
    for o in &outs[1..] {
        assert_eq!((o.1, &o.2), (outs[0].1, &outs[0].2), "{outs:?}");
    }
}

/// The driver library as another build (a copy of pocl's library whose GNU build-id
/// differs, found through its own ICD file): an entry made by the installed pocl is not
/// used by the copy, and the load is what it is without clshim.
#[test]
fn another_driver_build_is_another_build() {
    let c = Case::new("keys-driver");
    let (hdr, app) = (c.dir("hdr"), c.dir("app"));
    std::fs::write(hdr.join("val.h"), "#define VAL 4\n").unwrap();
    let opts = format!("--options=-I {}", s(&hdr));
    let vendors = pocl_copy(&c.d);
    let other = [("OCL_ICD_VENDORS", s(&vendors))];
    c.run(
        Under::Store,
        &app,
        &[
            format!("--save={}", s(&c.d.path("cache.bin"))),
            opts.clone(),
        ],
        &[],
    );
    c.warm(&c.d.path(""), &[]);
    let load = [format!("--load={}", s(&c.d.path("cache.bin"))), opts];
    let (native, records) = c.run(Under::Store, &app, &load, &[]);
    assert_eq!(
        (native.as_str(), made_from(&records).as_str()),
        ("VAL=4\n", "native")
    );
    let (copied, records) = c.run(Under::Store, &app, &load, &other);
    assert_eq!(copied, "VAL=4\n");
    assert_eq!(
        made_from(&records),
        "recipe",
        "the copy's build has no entry"
    );
}
