//! The registry of calibrator kinds round-trips through the spec parser:
//! every kind's defaults parse, display and deserialize back; every
//! out-of-range value is refused with its range in the message; every
//! registered kind has a fit.

use bertflow_calib::registry::{self, Default, ParamType, Value};
use bertflow_calib::{fit, CalibError, CalibSpec, Calibrator, FitOptions, MomentStats, KINDS};
use ndarray::Array2;

/// The spec of `kind` at its defaults (required values at their example).
fn defaults(kind: &registry::Kind) -> CalibSpec {
    let given: Vec<(&str, Value)> = kind
        .params
        .iter()
        .filter_map(|p| match p.default {
            Default::Required { example } => Some((p.name, example)),
            _ => None,
        })
        .collect();
    CalibSpec::new(kind.name, &given).unwrap()
}

#[test]
fn names_are_the_known_kinds_in_order() {
    let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
    assert_eq!(
        names,
        [
            "none",
            "sn",
            "whiten",
            "natsv",
            "sn+natsv",
            "pca",
            "softwhiten",
            "auto",
            "flow"
        ]
    );
    assert_eq!(
        registry::synopsis(),
        "none, sn, whiten[:k=N], natsv:k=N, sn+natsv:k=N, \
         pca[:k=N,centre=false|true], softwhiten[:alpha=X,shrink=X,drop=N,blend=X], auto, \
         flow[:levels=N,steps=N,width=N,epochs=N,lr=X,batch=N,seed=N,coupling=additive|affine,permutation=reverse|lu]"
    );
}

#[test]
fn every_kinds_defaults_parse_display_and_deserialize() {
    for kind in KINDS {
        let spec = defaults(kind);
        assert_eq!(spec.kind(), kind.name);
        let again: CalibSpec = spec.to_string().parse().unwrap();
        assert_eq!(again, spec, "{spec}");
        let json = serde_json::to_string(&spec).unwrap();
        let back: CalibSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec, "{json}");
        for (p, v) in spec.values() {
            match p.default {
                Default::Value(d) => assert_eq!(v, Some(d), "{} {}", kind.name, p.name),
                Default::Absent(_) => assert_eq!(v, None),
                Default::Required { example } => assert_eq!(v, Some(example)),
            }
        }
        // A kind with a required value does not parse without it.
        let required = kind
            .params
            .iter()
            .any(|p| matches!(p.default, Default::Required { .. }));
        assert_eq!(
            kind.name.parse::<CalibSpec>().is_err(),
            required,
            "{}",
            kind.name
        );
    }
}

/// Values just outside each parameter's range, and the text of the range.
fn outside(ty: ParamType) -> Vec<String> {
    match ty {
        ParamType::Int { min, max } => {
            let mut v = Vec::new();
            if min > 0 {
                v.push((min - 1).to_string());
            }
            if max < u64::MAX {
                v.push((max + 1).to_string());
            }
            v
        }
        ParamType::Float {
            min,
            max,
            min_open,
            max_open,
        } => {
            let mut v = vec!["nan".to_string(), "inf".to_string()];
            if min.is_finite() {
                v.push(if min_open {
                    min.to_string()
                } else {
                    (min - 0.5).to_string()
                });
            }
            if max.is_finite() {
                v.push(if max_open {
                    max.to_string()
                } else {
                    (max + 0.5).to_string()
                });
            }
            v
        }
        ParamType::Choice(_) => vec!["nonsense".to_string()],
    }
}

#[test]
fn out_of_range_values_are_refused_with_the_range() {
    let mut checked = 0;
    for kind in KINDS {
        for p in kind.params {
            for bad in outside(p.ty) {
                let text = format!("{}:{}={bad}", kind.name, p.name);
                let reason = match text.parse::<CalibSpec>() {
                    Err(CalibError::Spec { reason, .. }) => reason,
                    other => panic!("{text} should be refused, got {other:?}"),
                };
                let range = match p.ty {
                    ParamType::Choice(names) => names.join(", "),
                    _ => p.range(),
                };
                assert!(reason.contains(&range), "{text}: {reason} (wants {range})");
                assert!(reason.contains(p.name), "{text}: {reason}");
                checked += 1;
            }
        }
    }
    // whiten k, natsv k, sn+natsv k: 1 each; pca: k 1, centre 1; softwhiten:
    // 4 + 4 + 0 + 4; flow: levels, steps, width 2 each, epochs 1, lr 3,
    // batch 1, 2 choices.
    assert_eq!(checked, 3 + 2 + 12 + 6 + 1 + 3 + 1 + 2);
    let e = "whiten:k=0".parse::<CalibSpec>().unwrap_err().to_string();
    assert!(e.contains("k must be >= 1, got 0"), "{e}");
    let e = CalibSpec::new("flow", &[("levels", Value::Int(17))])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("levels must be an integer in 1..=16, got 17"),
        "{e}"
    );
    let e = CalibSpec::new("flow", &[("lr", Value::Int(1))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("lr must be a finite number > 0"), "{e}");
    let e = CalibSpec::new("whiten", &[("q", Value::Int(1))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("valid options for whiten: k"), "{e}");
    let e = CalibSpec::new("ica", &[]).unwrap_err().to_string();
    assert!(e.contains("unknown kind \"ica\""), "{e}");
}

#[test]
fn every_registered_kind_has_a_fit() {
    // Two correlated clusters: anisotropic enough for every kind.
    let (n, d) = (64, 8);
    let x = Array2::from_shape_fn((n, d), |(i, j)| {
        let t = (i as f32 * 0.37).sin() + (j as f32 + 1.0) * 0.1 * (i % 3) as f32;
        t + ((i * 7 + j * 13) % 11) as f32 * 0.05
    });
    for kind in KINDS {
        let mut spec = defaults(kind);
        if kind.name == "flow" {
            spec = "flow:levels=1,steps=1,width=4".parse().unwrap();
        }
        let fitted = fit(&spec, x.view(), &mut FitOptions::new()).unwrap();
        assert_eq!(fitted.kind(), kind.name);
        assert_eq!(fitted.spec(), spec);
        assert_eq!(fitted.transform(x.view()).unwrap().nrows(), n);
        let stats = MomentStats::from_data(x.view()).unwrap();
        assert_eq!(stats.fit(&spec).is_ok(), kind.moments, "{}", kind.name);
    }
}

#[test]
fn json_lists_every_kind_and_parameter() {
    let json = registry::to_json();
    let kinds = json.as_array().unwrap();
    assert_eq!(kinds.len(), KINDS.len());
    let flow = kinds.iter().find(|k| k["name"] == "flow").unwrap();
    assert_eq!(flow["moments"], false);
    let levels = &flow["params"][0];
    assert_eq!(levels["name"], "levels");
    assert_eq!(levels["type"], "int");
    assert_eq!(levels["default"], 3);
    assert_eq!(
        (levels["min"].as_u64(), levels["max"].as_u64()),
        (Some(1), Some(16))
    );
    let lr = &flow["params"][4];
    assert_eq!(
        (lr["type"].as_str(), lr["default"].as_f64()),
        (Some("float"), Some(1e-3))
    );
    assert_eq!(
        (lr["min_open"].as_bool(), lr["max"].is_null()),
        (Some(true), true)
    );
    let natsv = kinds.iter().find(|k| k["name"] == "natsv").unwrap();
    assert_eq!(natsv["params"][0]["required"], true);
    assert_eq!(natsv["params"][0]["example"], 5);
    let whiten = kinds.iter().find(|k| k["name"] == "whiten").unwrap();
    assert!(whiten["params"][0]["default"].is_null());
    assert!(whiten["params"][0]["absent"].is_string());
    let help = registry::help();
    for k in KINDS {
        assert!(help.contains(&k.synopsis()), "{}", k.name);
        for p in k.params {
            assert!(help.contains(&p.range()), "{} {}", k.name, p.name);
        }
    }
}
