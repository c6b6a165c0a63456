//! The CI quality gate: floors for one profile's gated aggregate (recall@5 and MRR@10), read
//! from a small YAML file that records the date they were set, and the check of a report
//! against them.
//!
//! ```yaml
//! profile: balanced
//! recall_at_5: 0.80
//! mrr_at_10: 0.65
//! set_on: 2025-06-01      # when these floors were measured and set
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::EvalError;
use super::report::EvalReport;

/// Minimum scores one profile must keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Floors {
    pub profile: String,
    pub recall_at_5: f64,
    pub mrr_at_10: f64,
    /// Date the floors were set (`YYYY-MM-DD`).
    pub set_on: String,
}

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
    let floors: Floors = serde_saphyr::from_str(&text).map_err(|e| {
        invalid(
            path,
            format!("{e} (keys: profile, recall_at_5, mrr_at_10, set_on as YYYY-MM-DD)"),
        )
    })?;
    if floors.profile.trim().is_empty() {
        return Err(invalid(
            path,
            "`profile` is empty; name the gated profile (e.g. balanced)",
        ));
    }
    for (key, value) in [
        ("recall_at_5", floors.recall_at_5),
        ("mrr_at_10", floors.mrr_at_10),
    ] {
        if !(value.is_finite() && (0.0..=1.0).contains(&value)) {
            return Err(invalid(
                path,
                format!("`{key}` is {value}; a floor lies in [0, 1]"),
            ));
        }
    }
    if !is_calendar_date(floors.set_on.trim()) {
        return Err(invalid(
            path,
            format!(
                "`set_on` is `{}`; write the date the floors were set as YYYY-MM-DD",
                floors.set_on
            ),
        ));
    }
    Ok(Floors {
        profile: floors.profile.trim().to_ascii_lowercase(),
        set_on: floors.set_on.trim().to_string(),
        ..floors
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

/// Checks the gated profile's aggregate (cases outside the gate excluded) against the floors.
/// Every failure message names the profile, the metric, the measured value and the floor.
pub fn check_gate(report: &EvalReport, floors: &Floors) -> Result<(), Vec<String>> {
    let Some(profile) = report
        .profiles
        .iter()
        .find(|p| p.profile.eq_ignore_ascii_case(&floors.profile))
    else {
        let ran: Vec<&str> = report.profiles.iter().map(|p| p.profile.as_str()).collect();
        return Err(vec![format!(
            "the gated profile `{}` is not in the report (profiles run: {}); include it in --compare",
            floors.profile,
            if ran.is_empty() {
                "none".to_string()
            } else {
                ran.join(", ")
            }
        )]);
    };
    if profile.gated_cases == 0 {
        return Err(vec![format!(
            "profile `{}` has no gated case ({} excluded): the gate cannot be checked",
            profile.profile, profile.excluded_cases
        )]);
    }
    let recall_at_5 = profile.recall_at.get("5").copied();
    let mut failures = Vec::new();
    let checks = [
        ("recall@5", recall_at_5, floors.recall_at_5),
        ("MRR@10", Some(profile.mrr_at_10), floors.mrr_at_10),
    ];
    for (metric, value, floor) in checks {
        match value {
            None => failures.push(format!(
                "{} {metric} was not measured (retrieve_k below 5?); the floor is {floor:.4}",
                profile.profile
            )),
            // A small tolerance: a value printed equal to its floor passes.
            Some(value) if value + 1e-9 < floor => failures.push(format!(
                "{} {metric} = {value:.4} is below its floor {floor:.4} (floors set on {}; {} gated cases)",
                profile.profile, floors.set_on, profile.gated_cases
            )),
            Some(_) => {}
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures)
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
        Floors {
            profile: "balanced".into(),
            recall_at_5: recall,
            mrr_at_10: mrr,
            set_on: "2025-06-01".into(),
        }
    }

    #[test]
    fn a_floors_file_loads_and_is_validated() {
        let (_d, path) = floors_file(
            "profile: Balanced\nrecall_at_5: 0.8\nmrr_at_10: 0.65\nset_on: 2025-06-01\n",
        );
        assert_eq!(
            load_floors(&path).unwrap(),
            Floors {
                profile: "balanced".into(),
                ..floors(0.8, 0.65)
            }
        );

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
    fn gate_messages_name_metric_value_and_floor() {
        let r = report(vec![profile(
            "balanced",
            vec![case_result("a", &[], true, 0.5, 0.5, 0.6)],
        )]);
        let failures = check_gate(&r, &floors(0.8, 0.7)).unwrap_err();
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert_eq!(
            failures[0],
            "balanced recall@5 = 0.6000 is below its floor 0.8000 (floors set on 2025-06-01; 1 gated cases)"
        );
        assert!(
            failures[1].starts_with("balanced MRR@10 = 0.5000 is below its floor 0.7000"),
            "{}",
            failures[1]
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
}
