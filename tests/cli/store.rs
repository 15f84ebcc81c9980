//! The native store as its user sees it (issue 31), on stores real runs made
//! (tests/c/native_client.c and tests/c/header_client.c under `substitute` with
//! `CLSHIM_WARM_SERVICE=0`, then `clshim warm`; jobs under `clshim run`, whose program
//! cache keeps their compiles): `clshim store` lists what the files hold (the compiles jobs
//! kept, entries and their bytes by device and driver build, the builds not kept and why,
//! the requests waiting, set aside and not the user's alone, the cap, the last warm step's
//! line), in text and JSON, naming devices and driver builds in words from before any warm
//! step ran; `clshim store --clear` removes clshim's files, kept compiles and their folders
//! among them, and keeps the user's in a store pointed at a folder of theirs; a store that
//! is not the user's alone is neither read nor cleared; and every folder clshim makes for
//! the store is the user's alone (0700) whatever the umask, those a run makes to keep its
//! compiles included.

use crate::common::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn native_client() -> PathBuf {
    build_c("native_client", &[])
}

fn header_client() -> PathBuf {
    build_c("header_client", &[])
}

/// A run of `bin ARGS` in `cwd` under `substitute` with `store`, leaving a request.
fn leave_request(bin: &Path, args: &[&str], cwd: &Path, store: &Path, kc: &Path) {
    let mut c = std::process::Command::new(bin);
    c.args(args)
        .current_dir(cwd)
        .env("CLSHIM_BINARIES", "substitute")
        .env("CLSHIM_NATIVE_STORE", store)
        .env("CLSHIM_WARM_SERVICE", "0")
        .env("POCL_CACHE_DIR", kc);
    let out = run(c, true);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
}

/// `clshim store ARGS --store STORE`.
fn store_cmd(store: &Path, args: &[&str]) -> std::process::Output {
    clshim_out(&[&["store", "--store", s(store)], args].concat(), &[])
}

/// `clshim store --json` (or `--clear --json`), checked to succeed.
fn store_json(store: &Path, args: &[&str]) -> Value {
    let out = store_cmd(store, &[args, &["--json"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("clshim store --json")
}

/// Every regular file below `dir`, with its size.
fn files_below(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let m = e.path().symlink_metadata().unwrap();
        if m.is_dir() {
            out.extend(files_below(&e.path()));
        } else if m.is_file() {
            out.push((e.path(), m.len()));
        }
    }
    out.sort();
    out
}

fn bytes(files: &[(PathBuf, u64)]) -> u64 {
    files.iter().map(|f| f.1).sum()
}

/// The flags word of the entry at `path` (its header's bytes 12..16).
fn entry_flags(path: &Path) -> u32 {
    let b = std::fs::read(path).unwrap();
    u32::from_le_bytes(b[12..16].try_into().unwrap())
}

fn stem(p: &Path) -> String {
    let name = p.file_name().unwrap().to_str().unwrap();
    name.split('.').next().unwrap().to_string()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `script` under `sh -c`, with none of the test process's clshim variables.
fn sh(script: &str) -> std::process::Output {
    let mut c = std::process::Command::new("sh");
    c.args(["-c", script]);
    run(c, false)
}

/// The key folders below `store/compiles`, each a kept compile's.
fn kept_folders(store: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(store.join("compiles"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// A folder for a run's `TMPDIR`, the user's alone: the node's folder of published
/// compiles is there, and a peer's compile another test left would be taken, not
/// compiled.
fn own_tmp(d: &Scratch, name: &str) -> PathBuf {
    let tmp = d.path(name);
    std::fs::create_dir_all(&tmp).unwrap();
    chmod(&tmp, 0o700);
    tmp
}

/// A store a run makes to keep its compiles (`clshim run`, whose program cache is on) is
/// 0700 with each folder made for it (its parents, `compiles/` and a kept compile's
/// folder), and so is a store the library makes for a request with its folders, whatever
/// the umask: a umask can take the owner's bits from the mode a folder is made with, and
/// under `umask 0277` such folders were made 0500 (a store its owner cannot write) before
/// they were set to 0700 after being made.
#[test]
fn every_folder_made_for_the_store_is_0700_whatever_the_umask() {
    let d = scratch("store-umask");
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_clshim"));
    let lib = shim_path();
    let bin = native_client();
    for umask in ["022", "002", "0277"] {
        let store = d.path(&format!("u{umask}/new/store"));
        let out = sh(&format!(
            "umask {umask}; TMPDIR={} POCL_CACHE_DIR={} exec {} run --lib {} --native-store {} \
             -- {} --save={}",
            s(&own_tmp(&d, &format!("tmp{umask}"))),
            s(&d.path(&format!("kc{umask}"))),
            s(&exe),
            s(&lib),
            s(&store),
            s(&bin),
            s(&d.path(&format!("u{umask}.bin")))
        ));
        assert!(out.status.success(), "{umask}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("writable"),
            "{umask}: {}",
            stderr(&out)
        );
        let kept = kept_folders(&store);
        assert_eq!(kept.len(), 1, "umask {umask}: {}", stderr(&out));
        let made = [
            store.clone(),
            d.path(&format!("u{umask}/new")),
            store.join("compiles"),
            kept[0].clone(),
        ];
        for dir in &made {
            assert_eq!(
                format!("{:04o}", mode(dir)),
                "0700",
                "umask {umask}: {}",
                dir.display()
            );
        }
        assert_eq!(mode(&d.path(&format!("u{umask}"))) & 0o700, 0o700);
    }
    // The library's: a `substitute` run that leaves a request makes the store, its
    // parents and `requests/`.
    let store = d.path("lib/new/store");
    let out = sh(&format!(
        "umask 0277; CLSHIM_BINARIES=substitute CLSHIM_WARM_SERVICE=0 CLSHIM_NATIVE_STORE={} \
         POCL_CACHE_DIR={} LD_PRELOAD={} exec {} --save={}",
        s(&store),
        s(&d.path("kc")),
        s(&lib),
        s(&bin),
        s(&d.path("c.bin"))
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(requests(&store).len(), 1, "{}", stderr(&out));
    for dir in [d.path("lib/new"), store.clone(), store.join("requests")] {
        assert_eq!(format!("{:04o}", mode(&dir)), "0700", "{}", dir.display());
    }
}

/// A store real runs filled (under `LD_PRELOAD` alone: no program cache, so no compile
/// kept): two builds kept, one that reads `__TIME__` (not kept), one whose kernel name
/// crashes pocl 3.1's binary query (set aside), made by `clshim warm` (so warm.log holds
/// its line), and then one request waiting. The listing's numbers are the files': no
/// compiles, entries and their bytes, the kept and not kept (with the reason), requests,
/// the set-aside mark, the total of every file, the cap; the device and the driver build
/// are named in words, already while the requests wait for the first warm step, and by
/// their ids once their labels are gone.
#[test]
fn the_listing_says_what_the_files_hold() {
    let d = scratch("store-list");
    let store = d.path("store");
    let kc = d.path("kc");
    let (native, header) = (native_client(), header_client());
    let app = d.path("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(
        app.join("val.h"),
        "#define VAL 3\n__constant char t[] = __TIME__;\n",
    )
    .unwrap();
    let save = |n: &str| format!("--save={}", s(&d.path(n)));
    for args in [
        vec![save("a.bin"), "--seed=1".into()],
        vec![save("b.bin"), "--seed=2".into()],
        vec![save("c.bin"), "--name-length=300".into(), "--no-run".into()],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        leave_request(&native, &args, &d, &store, &kc);
    }
    leave_request(&header, &[&save("h.bin")], &app, &store, &kc);

    // Before any warm step: four requests, their device and driver build in words.
    let before = store_json(&store, &[]);
    assert_eq!(before["requests"]["files"], 4, "{before:#}");
    assert_eq!(before["entries"]["files"], 0);
    let group = &before["by_device"][0];
    assert_eq!(
        before["by_device"].as_array().unwrap().len(),
        1,
        "{before:#}"
    );
    assert_eq!(group["requests"], 4);
    assert_eq!(group["device_label"]["platform"], POCL, "{group:#}");
    let library = group["driver_label"]["library"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(library.contains("libpocl"), "{group:#}");
    assert!(Path::new(&library).exists(), "{library}");
    let build_id = group["driver_label"]["build_id"].as_str().unwrap();
    assert!(
        build_id.len() == 40 && build_id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{build_id}"
    );
    let device = group["device"].as_str().unwrap().to_string();
    assert!(!device.starts_with("device "), "{device}");

    // The warm step, as after a job whose requests were kept waiting.
    let lib = shim_path();
    let out = clshim_out(&["warm", "--lib", s(&lib), "--store", s(&store)], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = std::fs::read_to_string(store.join("warm.log")).unwrap();
    assert!(
        stderr(&out).contains("the driver crashed"),
        "{}",
        stderr(&out)
    );
    leave_request(&native, &[&save("w.bin"), "--seed=4"], &d, &store, &kc);

    let entries = entries(&store);
    assert_eq!(entries.len(), 3, "{log}");
    let uncacheable: Vec<&PathBuf> = entries.iter().filter(|e| entry_flags(e) == 1).collect();
    assert_eq!(uncacheable.len(), 1, "{entries:?}");
    let sizes = |paths: &[PathBuf]| -> u64 {
        paths
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum()
    };
    let marks = store_files(&store.join("requests"), ".set-aside");
    assert_eq!(marks.len(), 1, "{log}");
    let waiting = requests(&store);
    assert_eq!(waiting.len(), 1);

    let j = store_json(&store, &[]);
    assert_eq!(j["store"], s(&store));
    assert_eq!(j["alone"], true);
    assert_eq!(j["mode"], "0700");
    assert_eq!(j["cap"], 1u64 << 30);
    assert_eq!(j["compiles"]["files"], 0, "{j:#}");
    assert_eq!(j["entries"]["files"], 3, "{j:#}");
    assert_eq!(j["entries"]["bytes"], sizes(&entries));
    assert_eq!(j["entries"]["not_kept"]["files"], 1);
    assert_eq!(
        j["entries"]["not_kept"]["bytes"],
        sizes(&[uncacheable[0].clone()])
    );
    assert_eq!(j["entries"]["kept"]["files"], 2);
    let not_kept = &j["not_kept"][0];
    assert_eq!(not_kept["key"], stem(uncacheable[0]));
    assert!(
        not_kept["why"].as_str().unwrap().contains("__TIME__"),
        "{not_kept:#}"
    );
    assert_eq!(j["requests"]["files"], 1);
    assert_eq!(j["requests"]["bytes"], sizes(&waiting));
    assert!(j["requests"]["oldest_seconds"].as_i64().unwrap() < 600);
    assert_eq!(j["set_aside"][0]["key"], stem(&marks[0]), "{j:#}");
    assert_eq!(j["requests"]["set_aside"], 1);
    let all = files_below(&store);
    assert_eq!(j["total"]["files"], all.len(), "{all:?}");
    assert_eq!(j["total"]["bytes"], bytes(&all));
    assert_eq!(j["not_clshims"]["files"], 0);
    assert_eq!(
        j["other"]["labels"]["files"], 2,
        "a device and a driver build"
    );
    assert_eq!(j["other"]["driver_files"]["files"], 1);
    let group = &j["by_device"][0];
    assert_eq!(
        (&group["entries"], &group["not_kept"], &group["requests"]),
        (&3.into(), &1.into(), &1.into())
    );
    assert_eq!(group["bytes"], sizes(&entries));
    let summary = j["warm_log"]["last_summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("clshim warm: {}: 2 made", s(&store)))
            && summary.contains("1 not kept")
            && summary.contains("1 failed"),
        "{summary}"
    );

    // The text says the same.
    let out = store_cmd(&store, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        format!("clshim store: {}\n", s(&store)),
        "  yours alone (owner uid ".to_string(),
        "  compiles      0         0 B  kept by jobs: 0 builds".to_string(),
        format!(
            "  entries       3  {:>10}  the driver's binaries: 2 kept, 1 not kept\n",
            size_text(sizes(&entries))
        ),
        "  requests      1 ".to_string(),
        "  cap                 1.0 GiB  CLSHIM_NATIVE_STORE_MAX".to_string(),
        format!("  {}  its preprocessed text holds", stem(uncacheable[0])),
        format!("  {}  ", stem(&marks[0])),
        format!("  {summary}\n"),
        format!("  {device}\n"),
    ] {
        assert!(text.contains(&line), "{line:?} in:\n{text}");
    }
    assert!(text.contains(&library), "{text}");

    // Without labels, the ids.
    let fp = group["fingerprint"].as_str().unwrap();
    let driver = group["driver"].as_str().unwrap();
    std::fs::remove_dir_all(store.join("devices")).unwrap();
    std::fs::remove_dir_all(store.join("drivers")).unwrap();
    let text = stdout(&store_cmd(&store, &[]));
    assert!(text.contains(&format!("  device {fp}\n")), "{text}");
    assert!(
        text.contains(&format!("  driver build {driver}\n")),
        "{text}"
    );
}

/// `clshim store`'s sizes, as it prints them.
fn size_text(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", ["KiB", "MiB", "GiB"][unit])
}

/// A store pointed at a folder of the user's: `--clear` removes the store's kept
/// compiles, entries, requests, marks, labels, lists of driver files and warm.log, and the
/// folders of clshim's it emptied, and keeps every file of the user's (one named like an
/// entry, one named like a source mark in `sources/`, a link and what it leads to, a
/// folder), the folder itself, and says what it removed. (The user's file in `sources/` is
/// written after the warm step: the step's cap removes files of such names that are older
/// than every entry, as its own marks of sources whose builds are gone.)
#[test]
fn clear_removes_clshims_files_and_keeps_the_users() {
    let d = scratch("store-clear");
    let store = d.path("mine");
    let kc = d.path("kc");
    let native = native_client();
    let lib = shim_path();
    std::fs::create_dir_all(store.join("sources")).unwrap();
    chmod(&store, 0o700);
    chmod(&store.join("sources"), 0o700);
    let outside = d.path("outside.txt");
    std::fs::write(&outside, "elsewhere").unwrap();
    let users: [(&str, &str); 4] = [
        ("notes.txt", "the user's notes"),
        ("0123456789abcdef.bin", "not an entry"),
        ("folder/inside.txt", "kept"),
        ("sources/0123456789abcdef", "a file of the user's"),
    ];
    let write = |(name, text): (&str, &str)| {
        std::fs::create_dir_all(store.join(name).parent().unwrap()).unwrap();
        std::fs::write(store.join(name), text).unwrap();
    };
    users[..3].iter().for_each(|u| write(*u));
    std::os::unix::fs::symlink(&outside, store.join("link.bin")).unwrap();

    // A job under `clshim run` (its kept compile, its request), then the warm step (the
    // entry, its source's mark, labels, warm.log), then one request waiting. The node's
    // warm service is off here: on, it would make the entry before the job ended (the
    // process waiting for it at its exit), and leave no request to list.
    let out = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--no-warm-service",
            "--binaries",
            "substitute",
            "--native-store",
            s(&store),
            "--",
            s(&native),
            &format!("--save={}", s(&d.path("a.bin"))),
        ],
        &[
            ("POCL_CACHE_DIR", s(&kc)),
            ("TMPDIR", s(&own_tmp(&d, "tmp"))),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let kept = kept_folders(&store);
    assert_eq!(kept.len(), 1, "{}", stderr(&out));
    let out = clshim_out(&["warm", "--lib", s(&lib), "--store", s(&store)], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The user's `*.bin` and the link among the names of entries.
    assert_eq!(entries(&store).len(), 3, "{}", stderr(&out));
    write(users[3]);
    leave_request(
        &native,
        &[&format!("--save={}", s(&d.path("b.bin"))), "--seed=2"],
        &d,
        &store,
        &kc,
    );
    assert_eq!(requests(&store).len(), 1);
    let before = store_json(&store, &[]);
    let foreign = before["not_clshims"]["files"].as_u64().unwrap();
    // Those of the folder's top and sources/ (folder/ is one), and the link.
    let user_files = users.len() as u64 + 1;
    assert_eq!(foreign, user_files, "{before:#}");
    let clshims = bytes(&files_below(&store)) - users.iter().map(|u| u.1.len() as u64).sum::<u64>();

    let c = store_json(&store, &["--clear"]);
    assert_eq!(c["removed"]["kept builds"]["files"], 1, "{c:#}");
    assert_eq!(c["removed"]["entries"]["files"], 1, "{c:#}");
    assert_eq!(c["removed"]["requests"]["files"], 1, "{c:#}");
    assert_eq!(c["removed"]["labels"]["files"], 2, "{c:#}");
    assert_eq!(c["removed"]["driver file lists"]["files"], 1, "{c:#}");
    assert_eq!(c["removed"]["source marks"]["files"], 1, "{c:#}");
    assert_eq!(c["removed"]["warm.log"]["files"], 1, "{c:#}");
    assert_eq!(c["total"]["bytes"], clshims, "{c:#}");
    assert_eq!(c["not_clshims"]["files"], user_files);
    assert_eq!(c["failed"], serde_json::json!([]));
    let gone: Vec<&str> = c["folders_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(
        gone,
        ["requests", "drivers", "devices", "compiles"],
        "{c:#}"
    );
    assert!(!kept[0].exists());
    for (name, text) in users {
        assert_eq!(
            std::fs::read_to_string(store.join(name)).unwrap(),
            text,
            "{name}"
        );
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "elsewhere");
    assert!(store
        .join("link.bin")
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    let left: Vec<PathBuf> = files_below(&store).into_iter().map(|f| f.0).collect();
    assert_eq!(left.len(), users.len(), "{left:?}");
    let after = store_json(&store, &[]);
    assert_eq!(after["total"]["files"], 0, "{after:#}");

    // The text of a clear says what went; a second one finds nothing of clshim's.
    leave_request(
        &native,
        &[&format!("--save={}", s(&d.path("c.bin"))), "--seed=3"],
        &d,
        &store,
        &kc,
    );
    let out = store_cmd(&store, &["--clear"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("clshim store: {}: removed ", s(&store))),
        "{text}"
    );
    assert!(
        text.contains(" requests\n") && text.contains(" labels\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("  left alone: {user_files} not clshim's")),
        "{text}"
    );
    assert!(requests(&store).is_empty());
}

/// What a job under `clshim run` keeps as it compiles (its program cache on, as by
/// default; no binary asked for, so no request and no entry): `clshim store` lists the kept
/// builds and first launches, their files and bytes, in the totals and by device and
/// driver build, named in words from the labels left with them, and a lease a job ended
/// too soon to remove among clshim's other files; `--clear` removes them and the folders
/// they were in, and keeps the user's files, in the store's folder and in `compiles/`,
/// which then stays.
#[test]
fn kept_compiles_are_listed_and_cleared_with_their_folders() {
    let d = scratch("store-kept");
    let store = d.path("mine");
    let native = native_client();
    let lib = shim_path();
    std::fs::create_dir_all(&store).unwrap();
    chmod(&store, 0o700);
    std::fs::write(store.join("notes.txt"), "the user's notes").unwrap();
    let job = |n: &str| {
        let out = clshim_out(
            &[
                "run",
                "--lib",
                s(&lib),
                "--native-store",
                s(&store),
                "--",
                s(&native),
                &format!("--save={}", s(&d.path(&format!("{n}.bin")))),
                &format!("--seed={}", n.len()),
            ],
            &[
                ("POCL_CACHE_DIR", s(&d.path(&format!("kc-{n}")))),
                ("TMPDIR", s(&own_tmp(&d, &format!("tmp-{n}")))),
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let out = job("a");

    let kept = kept_folders(&store);
    assert_eq!(kept.len(), 1, "{}", stderr(&out));
    let files: Vec<(PathBuf, u64)> = files_below(&kept[0])
        .into_iter()
        .filter(|f| f.0.extension().is_some_and(|e| e == "kc"))
        .collect();
    let (builds, launches): (Vec<_>, Vec<_>) = files
        .iter()
        .cloned()
        .partition(|f| f.0.ends_with("build.kc"));
    assert_eq!(builds.len(), 1, "{files:?}");
    assert_eq!(launches.len(), 1, "its kernel's first launch: {files:?}");
    // A rank ended while it compiled a first launch leaves its lease behind.
    let lease = kept[0].join("00000000000000ab.lease");
    std::fs::write(
        &lease,
        clshim_format::kept::lease_text("gone-node", 4_000_000),
    )
    .unwrap();
    let j = store_json(&store, &[]);
    assert_eq!(j["other"]["leases"]["files"], 1, "{j:#}");
    let count = |f: &[(PathBuf, u64)]| serde_json::json!({"files": f.len(), "bytes": bytes(f)});
    assert_eq!(j["compiles"]["files"], files.len(), "{j:#}");
    assert_eq!(j["compiles"]["bytes"], bytes(&files), "{j:#}");
    assert_eq!(j["compiles"]["builds"], count(&builds), "{j:#}");
    assert_eq!(j["compiles"]["first_launches"], count(&launches), "{j:#}");
    assert_eq!(j["entries"]["files"], 0, "{j:#}");
    assert_eq!(j["requests"]["files"], 0, "{j:#}");
    let group = &j["by_device"][0];
    assert_eq!(j["by_device"].as_array().unwrap().len(), 1, "{j:#}");
    assert_eq!(
        (
            &group["compiles"],
            &group["compile_bytes"],
            &group["entries"]
        ),
        (&1.into(), &bytes(&files).into(), &0.into()),
        "{group:#}"
    );
    assert_eq!(group["device_label"]["platform"], POCL, "{group:#}");
    let all = files_below(&store);
    assert_eq!(j["total"]["files"], all.len() - 1, "{all:?}");
    assert_eq!(j["not_clshims"]["files"], 1, "{j:#}");
    let text = stdout(&store_cmd(&store, &[]));
    assert!(
        text.contains(&format!(
            "  compiles      2  {:>10}  kept by jobs: 1 build, 1 first launch",
            size_text(bytes(&files))
        )),
        "{text}"
    );

    let c = store_json(&store, &["--clear"]);
    assert_eq!(c["removed"]["kept builds"], count(&builds), "{c:#}");
    assert_eq!(
        c["removed"]["kept first launches"],
        count(&launches),
        "{c:#}"
    );
    assert_eq!(c["removed"]["leases"]["files"], 1, "{c:#}");
    assert_eq!(c["failed"], serde_json::json!([]));
    let gone = c["folders_removed"].as_array().unwrap();
    assert!(gone.contains(&"compiles".into()), "{c:#}");
    assert!(!store.join("compiles").exists());
    assert_eq!(
        std::fs::read_to_string(store.join("notes.txt")).unwrap(),
        "the user's notes"
    );
    assert_eq!(store_json(&store, &[])["total"]["files"], 0);

    // A file of the user's in `compiles/`: the kept compile's folder goes, `compiles/`
    // stays, as only folders the clear emptied are removed.
    job("bb");
    let kept = kept_folders(&store);
    assert_eq!(kept.len(), 1);
    std::fs::write(store.join("compiles/mine.txt"), "kept").unwrap();
    let c = store_json(&store, &["--clear"]);
    assert_eq!(c["removed"]["kept builds"]["files"], 1, "{c:#}");
    assert_eq!(c["not_clshims"]["files"], 2, "{c:#}");
    assert!(!kept[0].exists(), "{c:#}");
    assert!(
        !c["folders_removed"]
            .as_array()
            .unwrap()
            .contains(&"compiles".into()),
        "{c:#}"
    );
    assert_eq!(
        std::fs::read_to_string(store.join("compiles/mine.txt")).unwrap(),
        "kept"
    );
}

/// A store (or a folder of it) that its group may write is not the user's alone: `clshim
/// store` says why and what to do and reads nothing (status 1), `--clear` removes nothing
/// (status 1), `--json` says so too; once it is `chmod 700`ed, a request of another user's
/// planted in it is listed as not the user's alone, and cleared.
#[test]
fn a_store_not_the_users_alone_is_neither_read_nor_cleared() {
    let d = scratch("store-refused");
    let store = d.path("store");
    let kc = d.path("kc");
    let native = native_client();
    leave_request(
        &native,
        &[&format!("--save={}", s(&d.path("a.bin")))],
        &d,
        &store,
        &kc,
    );
    let req = requests(&store).pop().unwrap();
    for (dir, mode) in [
        (store.clone(), 0o770),
        (store.join("requests"), 0o722),
        (store.join("devices"), 0o775),
    ] {
        chmod(&dir, mode);
        for args in [&[][..], &["--clear"]] {
            let out = store_cmd(&store, args);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
            let err = one_line_err(&out);
            assert!(
                err.starts_with(&format!("clshim store: {}: writable by", s(&dir)))
                    && err.contains("chmod 700 it"),
                "{err}"
            );
            assert!(stdout(&out).is_empty(), "{}", stdout(&out));
            assert!(req.exists(), "{args:?}: nothing removed");
        }
        let out = store_cmd(&store, &["--json"]);
        assert_eq!(out.status.code(), Some(1));
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["alone"], false);
        assert!(
            j["why_not_alone"].as_str().unwrap().contains("writable by"),
            "{j:#}"
        );
        chmod(&dir, 0o700);
    }

    // Another user's request in the user's own store: listed, never read, cleared.
    let planted = store.join("requests/0123456789abcdef.req");
    std::fs::copy(&req, &planted).unwrap();
    if give_to_nobody(&planted) {
        let j = store_json(&store, &[]);
        assert_eq!(j["requests"]["files"], 1, "only the user's counts: {j:#}");
        let why = &j["not_yours"][0];
        assert_eq!(why["file"], "requests/0123456789abcdef.req", "{j:#}");
        assert!(
            why["why"]
                .as_str()
                .unwrap()
                .starts_with("owned by uid 65534"),
            "{j:#}"
        );
        let text = stdout(&store_cmd(&store, &[]));
        assert!(
            text.contains("not yours alone (clshim never takes them; clshim store --clear removes them):\n  requests/0123456789abcdef.req: owned by uid 65534"),
            "{text}"
        );
        let c = store_json(&store, &["--clear"]);
        assert!(!planted.exists(), "{c:#}");
    }
}

/// Where there is nothing to read, `clshim store` says so with status 0: a store that is
/// off, and one no run made yet; usage errors are status 2.
#[test]
fn no_store_and_usage_errors() {
    let d = scratch("store-none");
    let out = clshim_out(&["store"], &[("CLSHIM_NATIVE_STORE", "off")]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("the native store is off"),
        "{}",
        stdout(&out)
    );
    let absent = d.path("absent");
    let out = store_cmd(&absent, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        format!(
            "clshim store: {}: no store yet (jobs under clshim run make it as they keep their \
             compiles): nothing held\n",
            s(&absent)
        )
    );
    let j = store_json(&absent, &["--clear"]);
    assert_eq!(j["exists"], false);
    assert!(!absent.exists(), "--clear makes no store");
    let home = d.path("home");
    let out = clshim_out(&["store", "--json"], &[("HOME", s(&home))]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["store"], s(&home.join(".cache/clshim/native")));
    for (args, err) in [
        (&["store", "DIR"][..], "store: unexpected argument 'DIR'"),
        (&["store", "--clean"], "did you mean --clear?"),
        (&["store", "--json=yes"], "option --json takes no value"),
    ] {
        let out = clshim_out(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            one_line_err(&out).contains(err),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
