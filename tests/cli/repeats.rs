//! "Do ranks compile the same programs?" (issue 32): the report's repeats across ranks,
//! from trace files written here. Three ranks build program 1 (rank 0 first, rank 1 again,
//! rank 2 takes rank 0's compile from the node) and rank 0 alone builds program 2; their
//! first launches do the same. The repeats are rank 1's compiles, with their CPU; what rank
//! 2 took from a peer and how long it waited are counted per program and per rank. Without
//! the sharing, the same repeats get the hint that names it.

use crate::common;
use crate::ranks::{build, launch, report_json, write_file};
use serde_json::{json, Value};

fn shared(mut r: Value, how: &str, waited: Option<f64>) -> Value {
    r["shared"] = json!(how);
    if let Some(w) = waited {
        r["peer_wait_seconds"] = json!(w);
    }
    r
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-9)
}

#[test]
fn the_report_counts_repeats_across_ranks_and_what_peers_gave() {
    let d = common::scratch("repeats-shared");
    let t = 1.75e9;
    write_file(
        &d,
        0,
        None,
        &[
            shared(build(1, t + 1.0, 1.0, Some(1.0)), "compiled", None),
            shared(launch(1, t + 2.0, 2.0, 0.0, 2.0), "compiled", None),
            build(2, t + 5.0, 0.5, Some(0.5)),
        ],
    );
    write_file(
        &d,
        1,
        None,
        &[
            shared(
                build(1, t + 1.5, 1.2, Some(1.2)),
                "compiled_after_waiting",
                Some(0.5),
            ),
            shared(launch(1, t + 3.0, 2.5, 0.0, 2.5), "compiled", None),
        ],
    );
    write_file(
        &d,
        2,
        None,
        &[
            shared(build(1, t + 1.0, 1.0, Some(0.05)), "from_peer", Some(0.95)),
            shared(launch(1, t + 2.1, 2.0, 0.0, 0.01), "from_peer", Some(1.9)),
        ],
    );
    let r = &report_json(&[common::s(&d)])["repeats"];
    assert_eq!(r["programs"], 2, "{r:#}");
    assert_eq!(r["programs_on_more_than_one_rank"], 1, "{r:#}");
    assert_eq!(r["builds"], 4, "{r:#}");
    assert_eq!(r["repeat_builds"], 1, "{r:#}");
    assert!(close(&r["repeat_build_cpu_seconds"], 1.2), "{r:#}");
    assert!(close(&r["build_cpu_seconds"], 2.75), "{r:#}");
    assert_eq!(r["repeat_first_launches"], 1, "{r:#}");
    assert!(close(&r["repeat_first_launch_cpu_seconds"], 2.5), "{r:#}");
    assert_eq!(r["builds_from_peer"], 1, "{r:#}");
    assert_eq!(r["first_launches_from_peer"], 1, "{r:#}");
    assert_eq!(r["compiled_after_waiting"], 1, "{r:#}");
    assert!(close(&r["peer_wait_seconds"], 0.5 + 0.95 + 1.9), "{r:#}");
    // Per program and rank: program 1 first (the repeated one).
    let p = &r["by_program"][0];
    assert_eq!(p["kernels"], json!(["k1"]), "{p:#}");
    assert_eq!(p["ranks"], 3);
    assert_eq!(p["repeats"], 2, "a build and a first launch: {p:#}");
    assert!(close(&p["repeat_cpu_seconds"], 3.7), "{p:#}");
    assert_eq!(p["builds"]["compiled"], 2);
    assert_eq!(p["builds"]["from_peer"], 1);
    assert_eq!(p["first_launches"]["from_peer"], 1);
    let per: Vec<(&str, u64, u64)> = p["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["rank"].as_str().unwrap(),
                x["compiled"].as_u64().unwrap(),
                x["from_peer"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(per, [("0", 1, 0), ("1", 1, 0), ("2", 0, 1)]);
    let ranks = r["by_rank"].as_array().unwrap();
    assert!(close(&ranks[1]["repeat_cpu_seconds"], 1.2), "{ranks:?}");
    assert!(
        close(&ranks[2]["builds"]["peer_wait_seconds"], 0.95),
        "{ranks:?}"
    );
    assert!(
        close(&ranks[2]["first_launches"]["peer_wait_seconds"], 1.9),
        "{ranks:?}"
    );

    let o = common::report(&[common::s(&d)]);
    let text = common::stdout(&o);
    assert!(text.contains("Repeats across ranks"), "{text}");
    assert!(
        text.contains("1 of 4 builds compiled a program another rank also compiled: 1.200 s"),
        "{text}"
    );
    assert!(
        text.contains("1 builds and 1 first launches taken from a peer"),
        "{text}"
    );
    assert!(!text.contains("hint: 44%"), "{text}");
}

#[test]
fn repeats_without_sharing_get_the_hint() {
    let d = common::scratch("repeats-plain");
    let t = 1.75e9;
    for rank in 0..2 {
        write_file(&d, rank, None, &[build(1, t + rank as f64, 1.0, Some(1.0))]);
    }
    let r = &report_json(&[common::s(&d)])["repeats"];
    assert_eq!(r["repeat_builds"], 1, "{r:#}");
    let text = common::stdout(&common::report(&[common::s(&d)]));
    assert!(
        text.contains("hint: 50% of build CPU went to programs another rank also compiled"),
        "{text}"
    );
    // The program cache is clshim run's default; later jobs take what each job keeps,
    // with no warm step to run.
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("under clshim run's program cache (on by default)")
            && words.contains("later jobs take the compiles each job keeps in the store")
            && !words.contains("warm"),
        "{text}"
    );
    // The same under the program cache with its sharing off: the hint names the switch.
    for f in std::fs::read_dir(&d).unwrap() {
        let p = f.unwrap().path();
        let t = std::fs::read_to_string(&p).unwrap();
        assert!(t.contains("\"host\":\"node\""));
        std::fs::write(
            &p,
            t.replacen(
                "\"host\":\"node\"",
                "\"host\":\"node\",\"program_cache\":true",
                1,
            ),
        )
        .unwrap();
    }
    let words = common::stdout(&common::report(&[common::s(&d)]))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        words.contains(
            "the program cache ran with its sharing off (CLSHIM_SHARE_BUILDS=0, --no-share-builds)"
        ),
        "{words}"
    );
    // One rank: nothing repeats, and the section is not printed.
    let one = common::scratch("repeats-one");
    write_file(&one, 0, None, &[build(1, t, 1.0, Some(1.0))]);
    let text = common::stdout(&common::report(&[common::s(&one)]));
    assert!(!text.contains("Repeats across ranks"), "{text}");
}
