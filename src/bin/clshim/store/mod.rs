//! `clshim store`: what the native store holds, as `ccache -s` and `pip cache info` show
//! theirs, and `clshim store --clear`, as `ccache -C` and `pip cache purge`. This module
//! owns the command: which store (warm's `Settings`, so the one `clshim warm` would warm:
//! `--store`, `$CLSHIM_NATIVE_STORE`, `off`, else `$HOME/.cache/clshim/native`), that it
//! is read only when it is the user's alone (the rule the library and the warm step
//! apply, `clshim_format::store::not_users_alone`, to each of its folders), and the exit
//! status: 0, 1 when the store cannot be read (not the user's alone, a folder that cannot
//! be listed) or a file could not be removed, 2 for usage (the grammar's, in `cli`). Its
//! parts: `survey` (which file is clshim's, and what it says), `summary` (the listing, text
//! and JSON), `clear` (the removal). It reads the store and writes nothing but
//! what `--clear` removes: a listing touches no entry (the cap's least recently used order
//! stays as it was).

pub mod clear;
pub mod summary;
pub mod survey;

use crate::cli::StoreOpts;
use crate::terminal;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;

/// Prints `doc` (pretty, with what a terminal would obey escaped).
fn print_json(doc: &serde_json::Value) {
    let text = serde_json::to_string_pretty(doc).expect("store JSON");
    println!("{}", terminal::json(&text));
}

/// A store that is not listed (off, absent, refused): its one line, or its JSON document.
fn not_listed(json: bool, store: Option<&Path>, doc: serde_json::Value, line: String) {
    if json {
        let mut doc = doc;
        doc["store"] = store.map(|s| s.display().to_string()).into();
        print_json(&doc);
    } else {
        println!("{}", terminal::text(&line));
    }
}

/// `clshim store`.
pub fn main(o: StoreOpts) -> ExitCode {
    let settings = crate::warm::Settings::from_lookup(o.store, &|n| std::env::var_os(n));
    let Some(store) = settings.store.as_deref() else {
        not_listed(
            o.json,
            None,
            serde_json::json!({"off": true}),
            "clshim store: the native store is off (CLSHIM_NATIVE_STORE=off): nothing held".into(),
        );
        return ExitCode::SUCCESS;
    };
    let shown = store.display().to_string();
    let owner = match store.symlink_metadata() {
        Ok(m) => (m.uid(), m.mode()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            not_listed(
                o.json,
                Some(store),
                serde_json::json!({"exists": false}),
                format!(
                    "clshim store: {shown}: no store yet (jobs under clshim run make it as they \
                     keep their compiles): nothing held"
                ),
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("clshim store: {}: {e}", terminal::text(&shown));
            return ExitCode::from(1);
        }
    };
    if let Err(why) = survey::check(store) {
        let doing = if o.clear { "not cleared" } else { "not read" };
        if o.json {
            print_json(&serde_json::json!({
                "store": shown, "exists": true, "alone": false, "why_not_alone": why,
            }));
        }
        eprintln!(
            "clshim store: {}; {doing}: clshim takes nothing from a store that is not yours \
             alone",
            terminal::text(&why)
        );
        return ExitCode::from(1);
    }
    let found = survey::survey(store);
    let mut status = 0;
    for (folder, why) in &found.unreadable {
        eprintln!(
            "clshim store: {}: cannot be read: {}",
            terminal::text(&store.join(folder).display().to_string()),
            terminal::text(why)
        );
        status = 1;
    }
    if o.clear {
        let c = clear::clear(store, &found);
        for (file, why) in &c.failed {
            eprintln!(
                "clshim store: cannot remove {}: {}",
                terminal::text(&store.join(file).display().to_string()),
                terminal::text(why)
            );
            status = 1;
        }
        if o.json {
            print_json(&c.json(store));
        } else {
            print!("{}", c.text(store));
        }
    } else {
        let s = summary::Summary::new(store, owner, settings.max, &found);
        if o.json {
            print_json(&s.json());
        } else {
            print!("{}", s.text());
        }
    }
    ExitCode::from(status)
}
