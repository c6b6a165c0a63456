//! The shipped evaluation datasets (`examples/rag/eval/`) load and validate: the golden file
//! (every ref names a corpus file, no overlapping refs, unique ids) and the BEIR fixture.

use std::path::PathBuf;

use orkeon_knowledge::eval::{CorpusSource, load_dataset};

fn eval_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/rag/eval"))
}

#[test]
fn the_golden_dataset_loads() {
    let dataset = load_dataset(&eval_dir().join("golden.yaml"), "test").unwrap();
    assert_eq!(dataset.name, "orkeon-golden");
    assert_eq!(dataset.collection, "golden-eval");
    assert!(dataset.cases.len() >= 50, "{} cases", dataset.cases.len());
    assert!(matches!(dataset.corpus, CorpusSource::Directory { .. }));
    let correctif = dataset
        .cases
        .iter()
        .filter(|c| c.tags.iter().any(|t| t == "correctif"))
        .count();
    assert!(correctif >= 5, "{correctif} correctif cases");
    assert!(dataset.cases.iter().all(|c| !c.relevant.is_empty()));
}

#[test]
fn the_beir_fixture_loads() {
    let dataset = load_dataset(&eval_dir().join("beir-mini"), "test").unwrap();
    assert_eq!(dataset.name, "beir-mini");
    assert_eq!(dataset.collection, "beir-mini");
    let CorpusSource::Beir { documents } = &dataset.corpus else {
        panic!("not a BEIR corpus");
    };
    assert!(documents.len() >= 10);
    assert!(!dataset.cases.is_empty());
    // Graded: some case has a grade-2 document.
    assert!(
        dataset
            .cases
            .iter()
            .any(|c| c.relevant.values().any(|g| *g == 2))
    );
}
