use super::*;

fn parse(s: &str) -> Result<CalibSpec> {
    s.parse()
}

fn reason(s: &str) -> String {
    match parse(s) {
        Err(CalibError::Spec { reason, .. }) => reason,
        other => panic!("{s:?} should be a spec error, got {other:?}"),
    }
}

#[test]
fn valid_specs_parse() {
    assert!(parse("none").unwrap().is_none());
    assert_eq!(parse(" sn ").unwrap().kind(), "sn");
    let w = parse("whiten").unwrap();
    assert_eq!((w.kind(), w.k()), ("whiten", None));
    assert_eq!(parse("whiten:k=256").unwrap().k(), Some(256));
    let n = parse("natsv:k=5").unwrap();
    assert_eq!((n.kind(), n.k()), ("natsv", Some(5)));
    let sn = parse("sn+natsv:k=5").unwrap();
    assert_eq!((sn.kind(), sn.k()), ("sn+natsv", Some(5)));
    assert_eq!(
        parse("flow").unwrap().flow_config().unwrap(),
        FlowConfig {
            levels: 3,
            steps: 3,
            width: 32,
            epochs: 1,
            lr: 1e-3,
            batch: 32,
            seed: 42,
            coupling: Coupling::Additive,
            permutation: Permutation::Reverse,
        }
    );
    let f = parse(
        "flow:levels=2, steps=4,width=16,epochs=3,lr=5e-4,batch=64,seed=7,coupling=affine,permutation=reverse",
    )
    .unwrap();
    assert_eq!(
        f.flow_config().unwrap(),
        FlowConfig {
            levels: 2,
            steps: 4,
            width: 16,
            epochs: 3,
            lr: 5e-4,
            batch: 64,
            seed: 7,
            coupling: Coupling::Affine,
            permutation: Permutation::Reverse,
        }
    );
    assert_eq!(f.seed(), Some(7));
    assert_eq!(CalibSpec::from_flow(&f.flow_config().unwrap()).unwrap(), f);
    let s = parse("softwhiten:alpha=0.7,blend=0.25").unwrap();
    let p = s.soft_params().unwrap();
    assert_eq!(
        (p.alpha(), p.shrink(), p.drop(), p.blend()),
        (0.7, 0.0, 0, 0.25)
    );
    assert_eq!(CalibSpec::from_soft(&p).unwrap(), s);
    assert_eq!(parse("auto").unwrap(), CalibSpec::auto());
    assert!(parse("flow").unwrap().soft_params().is_none());
}

#[test]
fn display_round_trips() {
    for s in [
        "none",
        "sn",
        "whiten",
        "whiten:k=3",
        "natsv:k=5",
        "sn+natsv:k=1",
        "flow",
        "flow:lr=0.0003,coupling=affine,seed=18446744073709551615",
        "flow:permutation=lu,levels=2",
        "softwhiten",
        "softwhiten:alpha=1,shrink=0.2,drop=3,blend=0.5",
        "auto",
    ] {
        let spec = parse(s).unwrap();
        let again = parse(&spec.to_string()).unwrap();
        assert_eq!(spec, again, "{s} -> {spec}");
        let json = serde_json::to_string(&spec).unwrap();
        let back: CalibSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(spec, back, "{json}");
    }
    let json = serde_json::to_string(&parse("sn+natsv:k=2").unwrap()).unwrap();
    assert_eq!(json, r#"{"kind":"sn+natsv","k":2}"#);
    assert_eq!(
        serde_json::to_string(&parse("whiten").unwrap()).unwrap(),
        r#"{"kind":"whiten","k":null}"#
    );
    assert_eq!(
        serde_json::to_string(&parse("softwhiten").unwrap()).unwrap(),
        r#"{"kind":"softwhiten","alpha":0.5,"shrink":0.0,"drop":0,"blend":0.0}"#
    );
    assert_eq!(
        serde_json::to_string(&parse("flow").unwrap()).unwrap(),
        r#"{"kind":"flow","levels":3,"steps":3,"width":32,"epochs":1,"lr":0.001,"batch":32,"seed":42,"coupling":"additive","permutation":"reverse"}"#
    );
    // The canonical strings written before the registry.
    assert_eq!(parse("whiten:k=3").unwrap().to_string(), "whiten:k=3");
    assert_eq!(
        parse("flow").unwrap().to_string(),
        "flow:levels=3,steps=3,width=32,epochs=1,lr=1e-3,batch=32,seed=42,coupling=additive,permutation=reverse"
    );
    assert_eq!(
        parse("softwhiten").unwrap().to_string(),
        "softwhiten:alpha=0.5,shrink=0"
    );
    assert_eq!(
        parse("softwhiten:drop=2,blend=0.5").unwrap().to_string(),
        "softwhiten:alpha=0.5,shrink=0,drop=2,blend=0.5"
    );
}

#[test]
fn deserialize_checks_values() {
    for bad in [
        r#"{"kind":"whiten","k":0}"#,
        r#"{"kind":"natsv"}"#,
        r#"{"kind":"flow","levels":0}"#,
        r#"{"kind":"flow","coupling":"spline"}"#,
        r#"{"kind":"softwhiten","alpha":2.0}"#,
        r#"{"kind":"sn","k":1}"#,
        r#"{"kind":"ica"}"#,
        r#"{"k":1}"#,
        r#"{"kind":"whiten","k":"3"}"#,
    ] {
        assert!(serde_json::from_str::<CalibSpec>(bad).is_err(), "{bad}");
    }
}

#[test]
fn invalid_specs_explain_what_is_valid() {
    assert!(reason("").contains("valid kinds"));
    assert!(reason("ica").contains("unknown kind \"ica\""));
    assert!(reason("ica").contains("whiten"));
    assert!(reason("sn:k=3").contains("sn takes no options"));
    assert!(reason("none:x=1").contains("takes no options"));
    assert!(reason("whiten:q=3").contains("valid options for whiten: k"));
    assert!(reason("whiten:k=0").contains("k must be >= 1"));
    assert!(reason("whiten:k=-1").contains("non-negative integer"));
    assert!(reason("whiten:k=abc").contains("non-negative integer"));
    assert!(reason("whiten:k").contains("key=value"));
    assert!(reason("whiten:k=").contains("empty"));
    assert!(reason("whiten:").contains("empty option"));
    assert!(reason("whiten:k=2,").contains("empty option"));
    assert!(reason("whiten:k=2,k=3").contains("twice"));
    assert!(reason("natsv").contains("natsv:k=5"));
    assert!(reason("natsv:k=0").contains("k must be >= 1"));
    assert!(reason("sn+natsv").contains("sn+natsv:k=5"));
    assert!(reason("flow:depth=3").contains("valid options for flow: levels, steps"));
    // An unknown key is reported before a bad value of a known one.
    assert!(reason("flow:levels=x,depth=3").contains("unknown option \"depth\""));
    assert!(reason("flow:levels=0").contains("levels must be an integer in 1..=16"));
    assert!(reason("flow:steps=0").contains("steps must be"));
    assert!(reason("flow:width=0").contains("width must be"));
    assert!(reason("flow:epochs=0").contains("epochs must be"));
    assert!(reason("flow:batch=1").contains("batch must be >= 2"));
    assert!(reason("flow:lr=0").contains("lr must be a finite number > 0"));
    assert!(reason("flow:lr=nan").contains("lr must be"));
    assert!(reason("flow:lr=fast").contains("expected a number"));
    assert!(reason("flow:seed=-3").contains("unsigned"));
    assert!(reason("flow:coupling=spline").contains("valid values: additive, affine"));
    assert!(reason("flow:permutation=shuffle").contains("valid values: reverse, lu"));
    assert!(reason("softwhiten:alpha=1.5").contains("alpha must be a number in [0, 1], got 1.5"));
    assert!(reason("softwhiten:blend=1").contains("blend must be a number in [0, 1), got 1"));
}
