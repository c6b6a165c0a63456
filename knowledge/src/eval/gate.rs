//! The CI quality gate: floors for one or more profiles' gated aggregates, read from a small
//! YAML file that records the date they were set, and the check of a report against them.
//!
//! One profile:
//!
//! ```yaml
//! profile: balanced
//! recall_at_5: 0.80
//! mrr_at_10: 0.65
//! set_on: 2025-06-01      # when these floors were measured and set
//! ```
//!
//! Several profiles, each with the metrics it must keep (any of `ndcg_at_10`, `mrr_at_10`,
//! `recall_at_5`, `recall_at_10`):
//!
//! ```yaml
//! set_on: 2025-06-01
//! profiles:
//!   fast: { ndcg_at_10: 0.70, recall_at_10: 0.90 }
//!   balanced: { ndcg_at_10: 0.80, mrr_at_10: 0.75 }
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::EvalError;
use super::report::{EvalReport, ProfileReport};

/// The metrics a floor can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Metric {
    NdcgAt10,
    MrrAt10,
    RecallAt5,
    RecallAt10,
}

impl Metric {
    /// The key in a floors file.
    pub fn key(self) -> &'static str {
        match self {
            Metric::NdcgAt10 => "ndcg_at_10",
            Metric::MrrAt10 => "mrr_at_10",
            Metric::RecallAt5 => "recall_at_5",
            Metric::RecallAt10 => "recall_at_10",
        }
    }

    /// The name in messages.
    pub fn label(self) -> &'static str {
        match self {
            Metric::NdcgAt10 => "nDCG@10",
            Metric::MrrAt10 => "MRR@10",
            Metric::RecallAt5 => "recall@5",
            Metric::RecallAt10 => "recall@10",
        }
    }

    /// The profile's gated value, `None` when the run did not measure it.
    fn value(self, profile: &ProfileReport) -> Option<f64> {
        match self {
            Metric::NdcgAt10 => Some(profile.ndcg_at_10),
            Metric::MrrAt10 => Some(profile.mrr_at_10),
            Metric::RecallAt5 => profile.recall_at.get("5").copied(),
            Metric::RecallAt10 => profile.recall_at.get("10").copied(),
        }
    }
}

/// Minimum scores one profile must keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileFloors {
    /// Lowercase profile name.
    pub profile: String,
    /// At least one (metric, floor), in metric order.
    pub floors: Vec<(Metric, f64)>,
}

/// A floors file: the profiles gated and when their floors were set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Floors {
    pub profiles: Vec<ProfileFloors>,
    /// Date the floors were set (`YYYY-MM-DD`).
    pub set_on: String,
}

impl Floors {
    /// Floors for one profile.
    pub fn single(profile: &str, floors: &[(Metric, f64)], set_on: &str) -> Self {
        Self {
            profiles: vec![ProfileFloors {
                profile: profile.to_ascii_lowercase(),
                floors: floors.to_vec(),
            }],
            set_on: set_on.to_string(),
        }
    }

    /// `balanced (recall@5, MRR@10), fast (nDCG@10)`: what the gate checks.
    pub fn describe(&self) -> String {
        self.profiles
            .iter()
            .map(|p| {
                let metrics: Vec<&str> = p.floors.iter().map(|(m, _)| m.label()).collect();
                format!("{} ({})", p.profile, metrics.join(", "))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The metrics of one profile as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    ndcg_at_10: Option<f64>,
    mrr_at_10: Option<f64>,
    recall_at_5: Option<f64>,
    recall_at_10: Option<f64>,
}

impl RawMetrics {
    fn floors(&self) -> Vec<(Metric, f64)> {
        [
            (Metric::NdcgAt10, self.ndcg_at_10),
            (Metric::MrrAt10, self.mrr_at_10),
            (Metric::RecallAt5, self.recall_at_5),
            (Metric::RecallAt10, self.recall_at_10),
        ]
        .into_iter()
        .filter_map(|(metric, value)| value.map(|v| (metric, v)))
        .collect()
    }
}

/// The file as written: either `profile` + metrics, or `profiles`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFloors {
    profile: Option<String>,
    ndcg_at_10: Option<f64>,
    mrr_at_10: Option<f64>,
    recall_at_5: Option<f64>,
    recall_at_10: Option<f64>,
    profiles: Option<BTreeMap<String, RawMetrics>>,
    set_on: String,
}

const KEYS: &str = "keys: set_on as YYYY-MM-DD, and either profile with ndcg_at_10 / mrr_at_10 / recall_at_5 / recall_at_10, or profiles: { NAME: { the same metrics } }";

fn invalid(path: &Path, message: impl Into<String>) -> EvalError {
    EvalError::InvalidFloors {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Reads and validates a floors file.
pub fn load_floors(path: &Path) -> Result<Floors, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let raw: RawFloors =
        serde_saphyr::from_str(&text).map_err(|e| invalid(path, format!("{e} ({KEYS})")))?;
    let single = RawMetrics {
        ndcg_at_10: raw.ndcg_at_10,
        mrr_at_10: raw.mrr_at_10,
        recall_at_5: raw.recall_at_5,
        recall_at_10: raw.recall_at_10,
    };
    let entries: Vec<(String, Vec<(Metric, f64)>)> = match (raw.profile, raw.profiles) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                path,
                "both `profile` and `profiles` are set; write one profile's floors at the top level or several under `profiles`, not both",
            ));
        }
        (Some(profile), None) => vec![(profile, single.floors())],
        (None, Some(profiles)) => {
            if !single.floors().is_empty() {
                return Err(invalid(
                    path,
                    "metrics at the top level with `profiles`: move them under the profile they gate",
                ));
            }
            if profiles.is_empty() {
                return Err(invalid(
                    path,
                    "`profiles` is empty; gate at least one profile",
                ));
            }
            profiles
                .into_iter()
                .map(|(name, metrics)| (name, metrics.floors()))
                .collect()
        }
        (None, None) => {
            return Err(invalid(
                path,
                format!(
                    "no profile is gated: name one with `profile` or several under `profiles` ({KEYS})"
                ),
            ));
        }
    };
    let mut profiles = Vec::new();
    for (name, floors) in entries {
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() {
            return Err(invalid(
                path,
                "a profile name is empty; name the gated profile (e.g. balanced)",
            ));
        }
        if floors.is_empty() {
            return Err(invalid(
                path,
                format!(
                    "profile `{name}` has no floor; give it at least one of ndcg_at_10, mrr_at_10, recall_at_5, recall_at_10"
                ),
            ));
        }
        for (metric, value) in &floors {
            if !(value.is_finite() && (0.0..=1.0).contains(value)) {
                return Err(invalid(
                    path,
                    format!(
                        "`{}` of `{name}` is {value}; a floor lies in [0, 1]",
                        metric.key()
                    ),
                ));
            }
        }
        if profiles.iter().any(|p: &ProfileFloors| p.profile == name) {
            return Err(invalid(
                path,
                format!("profile `{name}` is gated twice (names are case-insensitive)"),
            ));
        }
        profiles.push(ProfileFloors {
            profile: name,
            floors,
        });
    }
    profiles.sort_by(|a, b| a.profile.cmp(&b.profile));
    if !is_calendar_date(raw.set_on.trim()) {
        return Err(invalid(
            path,
            format!(
                "`set_on` is `{}`; write the date the floors were set as YYYY-MM-DD",
                raw.set_on
            ),
        ));
    }
    Ok(Floors {
        profiles,
        set_on: raw.set_on.trim().to_string(),
    })
}

/// Whether `text` is a real `YYYY-MM-DD` date.
fn is_calendar_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let [year, month, day] = parts.as_slice() else {
        return false;
    };
    if year.len() != 4 || month.len() != 2 || day.len() != 2 {
        return false;
    }
    let (Ok(year), Ok(month), Ok(day)) =
        (year.parse::<i32>(), month.parse::<u8>(), day.parse::<u8>())
    else {
        return false;
    };
    time::Month::try_from(month)
        .ok()
        .and_then(|month| time::Date::from_calendar_date(year, month, day).ok())
        .is_some()
}

/// Checks every gated profile's aggregate (cases outside the gate excluded) against its
/// floors. Every failure message names the profile, the metric, the measured value and the
/// floor.
pub fn check_gate(report: &EvalReport, floors: &Floors) -> Result<(), Vec<String>> {
    let mut failures = Vec::new();
    for gated in &floors.profiles {
        check_profile(report, gated, &floors.set_on, &mut failures);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures)
    }
}

fn check_profile(
    report: &EvalReport,
    gated: &ProfileFloors,
    set_on: &str,
    failures: &mut Vec<String>,
) {
    let Some(profile) = report
        .profiles
        .iter()
        .find(|p| p.profile.eq_ignore_ascii_case(&gated.profile))
    else {
        let ran: Vec<&str> = report.profiles.iter().map(|p| p.profile.as_str()).collect();
        failures.push(format!(
            "the gated profile `{}` is not in the report (profiles run: {}); include it in --compare",
            gated.profile,
            if ran.is_empty() {
                "none".to_string()
            } else {
                ran.join(", ")
            }
        ));
        return;
    };
    if profile.gated_cases == 0 {
        failures.push(format!(
            "profile `{}` has no gated case ({} excluded): the gate cannot be checked",
            profile.profile, profile.excluded_cases
        ));
        return;
    }
    for &(metric, floor) in &gated.floors {
        let label = metric.label();
        match metric.value(profile) {
            None => failures.push(format!(
                "{} {label} was not measured (retrieve_k below its cut-off?); the floor is {floor:.4}",
                profile.profile
            )),
            // A small tolerance: a value printed equal to its floor passes.
            Some(value) if value + 1e-9 < floor => failures.push(format!(
                "{} {label} = {value:.4} is below its floor {floor:.4} (floors set on {set_on}; {} gated cases)",
                profile.profile, profile.gated_cases
            )),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::report::tests::{case_result, profile, report};
    use std::fs;

    fn floors_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("floors.yaml");
        fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn floors(recall: f64, mrr: f64) -> Floors {
        Floors::single(
            "balanced",
            &[(Metric::MrrAt10, mrr), (Metric::RecallAt5, recall)],
            "2025-06-01",
        )
    }

    #[test]
    fn a_floors_file_loads_and_is_validated() {
        let (_d, path) = floors_file(
            "profile: Balanced\nrecall_at_5: 0.8\nmrr_at_10: 0.65\nset_on: 2025-06-01\n",
        );
        assert_eq!(load_floors(&path).unwrap(), floors(0.8, 0.65));

        let (_d, path) = floors_file(
            "profile: balanced\nrecall_at_5: 1.3\nmrr_at_10: 0.65\nset_on: 2025-06-01\n",
        );
        let err = load_floors(&path).unwrap_err().to_string();
        assert!(
            err.contains("floors.yaml") && err.contains("recall_at_5") && err.contains("[0, 1]"),
            "{err}"
        );

        let (_d, path) = floors_file(
            "profile: balanced\nrecall_at_5: 0.8\nmrr_at_10: 0.65\nset_on: 2025-02-30\n",
        );
        assert!(
            load_floors(&path)
                .unwrap_err()
                .to_string()
                .contains("YYYY-MM-DD")
        );

        let (_d, path) =
            floors_file("profile: balanced\nrecall_at_5: 0.8\nmrr: 0.65\nset_on: 2025-06-01\n");
        let err = load_floors(&path).unwrap_err().to_string();
        assert!(err.contains("mrr"), "{err}");

        let (_d, path) = floors_file("profile: balanced\nset_on: 2025-06-01\n");
        let err = load_floors(&path).unwrap_err().to_string();
        assert!(err.contains("`balanced` has no floor"), "{err}");
    }

    #[test]
    fn a_multi_profile_floors_file_loads_and_is_validated() {
        let (_d, path) = floors_file(
            "set_on: 2026-12-04\nprofiles:\n  Fast: { ndcg_at_10: 0.7, recall_at_10: 0.9 }\n  balanced: { ndcg_at_10: 0.8, mrr_at_10: 0.75 }\n",
        );
        let loaded = load_floors(&path).unwrap();
        assert_eq!(
            loaded,
            Floors {
                profiles: vec![
                    ProfileFloors {
                        profile: "balanced".into(),
                        floors: vec![(Metric::NdcgAt10, 0.8), (Metric::MrrAt10, 0.75)],
                    },
                    ProfileFloors {
                        profile: "fast".into(),
                        floors: vec![(Metric::NdcgAt10, 0.7), (Metric::RecallAt10, 0.9)],
                    },
                ],
                set_on: "2026-12-04".into(),
            }
        );
        assert_eq!(
            loaded.describe(),
            "balanced (nDCG@10, MRR@10), fast (nDCG@10, recall@10)"
        );

        for (text, expected) in [
            (
                "set_on: 2026-12-04\nprofile: fast\nprofiles:\n  fast: { ndcg_at_10: 0.7 }\n",
                "both `profile` and `profiles`",
            ),
            (
                "set_on: 2026-12-04\nndcg_at_10: 0.5\nprofiles:\n  fast: { ndcg_at_10: 0.7 }\n",
                "move them under the profile",
            ),
            ("set_on: 2026-12-04\nprofiles: {}\n", "`profiles` is empty"),
            ("set_on: 2026-12-04\n", "no profile is gated"),
            (
                "set_on: 2026-12-04\nprofiles:\n  fast: { ndcg: 0.7 }\n",
                "ndcg",
            ),
            (
                "set_on: 2026-12-04\nprofiles:\n  fast: { ndcg_at_10: -0.1 }\n",
                "`ndcg_at_10` of `fast` is -0.1",
            ),
            (
                "set_on: 2026-12-04\nprofiles:\n  fast: {}\n",
                "`fast` has no floor",
            ),
        ] {
            let (_d, path) = floors_file(text);
            let err = load_floors(&path).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
            assert!(err.contains("floors.yaml"), "{err}");
        }
    }

    #[test]
    fn the_gate_passes_at_or_above_the_floors() {
        let r = report(vec![profile(
            "balanced",
            vec![
                case_result("a", &[], true, 1.0, 1.0, 1.0),
                case_result("b", &[], true, 0.5, 0.5, 0.6),
                case_result("c", &["correctif"], false, 0.0, 0.0, 0.0),
            ],
        )]);
        // Gated: recall@5 = 0.8, MRR@10 = 0.75 (the excluded case does not drag them down).
        assert_eq!(check_gate(&r, &floors(0.8, 0.75)), Ok(()));
        assert_eq!(check_gate(&r, &floors(0.5, 0.5)), Ok(()));
    }

    #[test]
    fn every_gated_profile_and_metric_is_checked() {
        let r = report(vec![
            profile("fast", vec![case_result("a", &[], true, 0.5, 0.5, 0.6)]),
            profile("balanced", vec![case_result("a", &[], true, 1.0, 1.0, 1.0)]),
        ]);
        let fast = &r.profiles[0];
        let both = |fast_ndcg: f64| Floors {
            profiles: vec![
                ProfileFloors {
                    profile: "balanced".into(),
                    floors: vec![(Metric::NdcgAt10, r.profiles[1].ndcg_at_10)],
                },
                ProfileFloors {
                    profile: "fast".into(),
                    floors: vec![(Metric::NdcgAt10, fast_ndcg), (Metric::MrrAt10, 0.5)],
                },
            ],
            set_on: "2026-12-04".into(),
        };
        assert_eq!(check_gate(&r, &both(fast.ndcg_at_10)), Ok(()));
        let failures = check_gate(&r, &both(fast.ndcg_at_10 + 0.01)).unwrap_err();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].starts_with("fast nDCG@10 = "), "{failures:?}");

        let mut missing = both(0.0);
        missing.profiles.push(ProfileFloors {
            profile: "quality".into(),
            floors: vec![(Metric::RecallAt10, 0.1)],
        });
        let failures = check_gate(&r, &missing).unwrap_err();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].contains("`quality` is not in the report (profiles run: fast, balanced)"),
            "{failures:?}"
        );
    }

    #[test]
    fn gate_messages_name_metric_value_and_floor() {
        let r = report(vec![profile(
            "balanced",
            vec![case_result("a", &[], true, 0.5, 0.5, 0.6)],
        )]);
        let failures = check_gate(&r, &floors(0.8, 0.7)).unwrap_err();
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(
            failures[0].starts_with("balanced MRR@10 = 0.5000 is below its floor 0.7000"),
            "{}",
            failures[0]
        );
        assert_eq!(
            failures[1],
            "balanced recall@5 = 0.6000 is below its floor 0.8000 (floors set on 2025-06-01; 1 gated cases)"
        );

        let only_fast = report(vec![profile(
            "fast",
            vec![case_result("a", &[], true, 1.0, 1.0, 1.0)],
        )]);
        let failures = check_gate(&only_fast, &floors(0.1, 0.1)).unwrap_err();
        assert!(
            failures[0].contains("`balanced` is not in the report (profiles run: fast)"),
            "{failures:?}"
        );

        let all_excluded = report(vec![profile(
            "balanced",
            vec![case_result("c", &["correctif"], false, 1.0, 1.0, 1.0)],
        )]);
        let failures = check_gate(&all_excluded, &floors(0.1, 0.1)).unwrap_err();
        assert!(failures[0].contains("no gated case"), "{failures:?}");
    }

    #[test]
    fn the_shipped_floors_files_load() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rag/eval");
        let mut loaded = Vec::new();
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with("floors") && name.ends_with(".yaml") {
                let floors = load_floors(&path).unwrap_or_else(|e| panic!("{e}"));
                assert!(!floors.profiles.is_empty(), "{name}");
                loaded.push(name);
            }
        }
        loaded.sort();
        assert_eq!(
            loaded,
            [
                "floors-beir-mini.yaml",
                "floors-scifact-train.yaml",
                "floors.yaml"
            ]
        );
    }
}
