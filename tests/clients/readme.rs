//! The README's examples are what clshim prints: the quick start's exit lines (a first job
//! on 2 ranks of current pyopencl under `clshim run` with no flags, one rank compiling and
//! keeping, the other taking its peer's compile; then the next job on a fresh node, taking
//! everything from the store) come out of the same command, clause for clause, with only the
//! numbers (counts, seconds, pids, ranks) free, and a peer's compile and the store's (which
//! the peer kept first: the ranks' race decides) alike. In the first job, which rank
//! compiles which program is the ranks' race too (one may compile all, or they split them),
//! so there a line's own compiles and those from elsewhere are alike as well.

use crate::common::*;

/// The README's example exit lines (`clshim: rank ...`), one list per code block that holds
/// any: the first job's, then the next job's.
fn readme_exit_lines() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let mut blocks: Vec<Vec<String>> = vec![Vec::new()];
    for l in readme.lines() {
        if l.starts_with("```") && !blocks.last().unwrap().is_empty() {
            blocks.push(Vec::new());
        } else if l.starts_with("clshim: rank ") {
            blocks.last_mut().unwrap().push(l.to_string());
        }
    }
    blocks.retain(|b| !b.is_empty());
    blocks
}

/// A shape (`shape`) with which of a rank's compiles were its own and which came from
/// elsewhere left open: in a first job, the ranks' race decides.
fn either_way(shape: &str) -> String {
    shape
        .replace(
            "# compiled and kept in the store, # from elsewhere",
            "# compiled here or elsewhere",
        )
        .replace(
            "# compiled and kept in the store",
            "# compiled here or elsewhere",
        )
        .replace("# from elsewhere", "# compiled here or elsewhere")
}

/// A line with every number replaced by `#`, and where a compile came from beside this
/// rank's own (a peer, or the store a peer kept it in first: which comes first is the
/// ranks' race) as one word: what must match.
fn shape(line: &str) -> String {
    let line = line
        .replace("from a peer", "from elsewhere")
        .replace("from the store", "from elsewhere");
    let mut out = String::new();
    let mut in_number = false;
    for c in line.chars() {
        if c.is_ascii_digit() || (in_number && c == '.') {
            if !in_number {
                out.push('#');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

#[test]
fn the_quick_starts_exit_lines_are_what_clshim_prints() {
    if !needs(&[PYOPENCL_CURRENT, MPIEXEC]) {
        return;
    }
    let examples = readme_exit_lines();
    assert!(
        examples.len() == 2 && examples[0].len() >= 2 && !examples[1].is_empty(),
        "the first job's lines, then the next job's: {examples:?}"
    );
    let d = scratch("readme-quick-start");
    let store = d.path("store");
    let job = |tag: &str| {
        let tmp = d.path(&format!("tmp-{tag}"));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut c = clshim();
        c.args([
            "run",
            "--lib",
            s(&shim_path()),
            "--native-store",
            s(&store),
            "--",
        ])
        .args(["mpiexec", "-n", "2"])
        .arg(venv_python("current"))
        .arg(repo_root().join("bench/workload.py"))
        .args([
            "-n",
            "2",
            "-s",
            "60",
            "--cache-root",
            s(&d.path(&format!("caches-{tag}"))),
        ]);
        clear_shim_env(&mut c, &[]);
        c.env("TMPDIR", &tmp);
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
            .lines()
            .filter(|l| l.starts_with("clshim: rank "))
            .map(shape)
            .collect::<Vec<_>>()
    };
    let first: Vec<String> = job("first").iter().map(|l| either_way(l)).collect();
    let next = job("next");
    let said = |example: &str, printed: &[String]| {
        format!(
            "the README's\n{example}\nis no line clshim printed:\n{}",
            printed.join("\n")
        )
    };
    for example in &examples[0] {
        let want = either_way(&shape(example));
        assert!(first.contains(&want), "{}", said(example, &first));
    }
    for example in &examples[1] {
        assert!(next.contains(&shape(example)), "{}", said(example, &next));
    }
}
