//! `substitute` on a node with no idle core (`CLSHIM_SUBSTITUTE_WHEN_BUSY`, off by default):
//! with the warm service on, a program whose first binary query finds every CPU of the
//! process busy gets the driver's own answer, as without clshim, unless the store already
//! holds its driver's binary; its sizes and binaries agree, nothing is left for the service,
//! the exit line says so, and the application's kept binary loads as pocl's own. With the
//! variable set, or the warm service off, the query is substituted as on an idle node.
//! The process is made busy by binding it to one CPU (`taskset`): its own build keeps that
//! CPU busy, and no other is its. Every other test of the suite sets the variable
//! (`substitute_when_busy`).

use crate::common::*;
use std::path::{Path, PathBuf};

fn client() -> PathBuf {
    build_c("native_client", &[])
}

/// `taskset -c CPU BIN ARGS`: `bin` bound to the first CPU this test may run on.
fn pinned(bin: &Path, args: &[&str]) -> (PathBuf, Vec<String>) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    let first: String = allowed.chars().take_while(char::is_ascii_digit).collect();
    let mut v = vec!["-c".to_string(), first, s(bin).to_string()];
    v.extend(args.iter().map(|a| a.to_string()));
    (PathBuf::from("taskset"), v)
}

/// `--save=FILE` of the client under `substitute`, bound to one CPU, with the warm service
/// on and `extra`.
fn save(bin: &Path, d: &Scratch, file: &Path, store: &str, extra: &[(&str, &str)]) -> Ran {
    let kc = d.path("kc");
    let save = format!("--save={}", s(file));
    let mut env = vec![
        ("CLSHIM_BINARIES", "substitute"),
        ("CLSHIM_NATIVE_STORE", store),
        ("CLSHIM_WARM_SERVICE", "1"),
        ("CLSHIM_SUBSTITUTE_WHEN_BUSY", "0"),
        ("POCL_CACHE_DIR", s(&kc)),
    ];
    env.extend_from_slice(extra);
    let (taskset, args) = pinned(bin, &[save.as_str()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = shimmed(Driver::Pocl, &taskset, &args, &env);
    r.ok().has_line("saved");
    r
}

fn actions(r: &Ran) -> Vec<String> {
    r.events("binary_query")
        .iter()
        .map(|q| q["action"].as_str().unwrap().to_string())
        .collect()
}

/// On a busy node the driver answers both queries of the program (sizes, then binaries),
/// no request is left, the exit line says why, and the application's binary is pocl's own:
/// it loads, under clshim and without it, as the driver's.
#[test]
fn on_a_busy_node_the_driver_answers_and_its_binary_loads_as_without_clshim() {
    let bin = client();
    let d = scratch("busy-node");
    let store = d.path("store");
    let file = d.path("saved.bin");
    let r = save(&bin, &d, &file, s(&store), &[]);
    assert_eq!(
        actions(&r),
        ["driver-on-busy-node", "driver-on-busy-node"],
        "{}",
        exit_line(&r.out)
    );
    assert!(requests(&store).is_empty(), "{:?}", requests(&store));
    let line = exit_line(&r.out);
    assert!(
        line.contains("2 answered by the driver (no core was idle"),
        "{line}"
    );
    assert!(!line.contains("warm service made"), "{line}");
    let bytes = std::fs::read(&file).unwrap();
    assert!(
        !bytes.starts_with(b"CLSHIMB\0"),
        "a clshim binary was handed out"
    );

    // The saved binary loads as the driver's own, with clshim and without.
    let load = format!("--load={}", s(&file));
    let kc = d.path("kc");
    let kc_env = [("POCL_CACHE_DIR", s(&kc))];
    let without = plain(Driver::Pocl, &bin, &[load.as_str()], &kc_env);
    without.ok();
    let with = shimmed(Driver::Pocl, &bin, &[load.as_str()], &kc_env);
    with.ok();
    assert_eq!(with.stdout(), without.stdout());
    assert_eq!(with.one("binary_load")["action"], "forward");
    let line = exit_line(&with.out);
    assert!(
        line.contains("1 binary loads (0 rejected): 1 the driver's own binaries"),
        "{line}"
    );
}

/// A busy process substitutes where asked to (`CLSHIM_SUBSTITUTE_WHEN_BUSY=1`: the service
/// makes the driver's binary), with the warm service off (the request waits for `clshim
/// warm`), and where no request could be left (no store: nothing for a service to make).
#[test]
fn asked_to_with_the_service_off_or_with_no_store_a_busy_process_substitutes() {
    let bin = client();
    for (what, store, extra, left) in [
        ("asked to", true, ("CLSHIM_SUBSTITUTE_WHEN_BUSY", "1"), 0),
        ("service off", true, ("CLSHIM_WARM_SERVICE", "0"), 1),
        ("no store", false, ("CLSHIM_SUBSTITUTE_WHEN_BUSY", "0"), 0),
    ] {
        let d = scratch("busy-node-substitutes");
        let file = d.path("saved.bin");
        let dir = d.path("store");
        let named = if store { s(&dir) } else { "off" };
        let r = save(&bin, &d, &file, named, &[extra]);
        assert_eq!(actions(&r), ["substitute", "substitute"], "{what}");
        let line = exit_line(&r.out);
        assert!(!line.contains("answered by the driver"), "{what}: {line}");
        assert_eq!(requests(&dir).len(), left, "{what}: {line}");
        if what == "asked to" {
            assert!(
                line.contains("warm service made the driver's binaries"),
                "{line}"
            );
        }
    }
}

/// Where the store holds the build's driver's binary, a busy node still substitutes: the
/// clshim binary costs nothing later, its load takes that binary.
#[test]
fn a_busy_node_substitutes_where_the_store_holds_the_drivers_binary() {
    let bin = client();
    let d = scratch("busy-node-stored");
    let store = d.path("store");
    let first = d.path("first.bin");
    save(
        &bin,
        &d,
        &first,
        s(&store),
        &[
            ("CLSHIM_WARM_SERVICE", "0"),
            ("CLSHIM_SUBSTITUTE_WHEN_BUSY", "1"),
        ],
    );
    assert_eq!(requests(&store).len(), 1);
    let out = warm_out(&store, &[]);
    assert!(out.status.success(), "clshim warm: {}", stderr(&out));
    assert_eq!(entries(&store).len(), 1);

    let again = d.path("again.bin");
    let r = save(&bin, &d, &again, s(&store), &[]);
    assert_eq!(
        actions(&r),
        ["substitute", "substitute"],
        "{}",
        exit_line(&r.out)
    );
    assert!(requests(&store).is_empty());
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&again).unwrap()
    );
}
