//! No result is dropped without a reason: every `let _ =` and every `.ok();` statement in `src/` has a comment
//! saying why it is ignored ("ignored", any case) on its line or on one of the three lines above it.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `file:line` of every drop in `text` without its reason.
fn unexplained(name: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        if !(code.contains("let _ =") || code.trim_end().ends_with(".ok();")) {
            continue;
        }
        let explained = lines[i.saturating_sub(3)..=i].iter().any(|l| l.to_lowercase().contains("ignored"));
        if !explained {
            out.push(format!("{name}:{}: {}", i + 1, line.trim()));
        }
    }
    out
}

#[test]
fn every_dropped_result_in_src_says_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 20, "found the sources");
    let mut missing = Vec::new();
    for f in &files {
        let name = f.strip_prefix(root).unwrap().display().to_string();
        missing.extend(unexplained(&name, &std::fs::read_to_string(f).unwrap()));
    }
    assert!(missing.is_empty(), "results dropped without a `// Ignored: <why>` comment:\n{}", missing.join("\n"));
}

#[test]
fn the_check_finds_an_unexplained_drop_and_accepts_an_explained_one() {
    let bad = "fn f() {\n    let _ = g();\n    h().ok();\n}\n";
    assert_eq!(unexplained("x.rs", bad), vec!["x.rs:2: let _ = g();", "x.rs:3: h().ok();"]);
    let good = "fn f() {\n    // Ignored: g is best effort.\n    let _ = g();\n    h().ok(); // ignored: same\n}\n";
    assert!(unexplained("x.rs", good).is_empty());
}
