//! The table of calibrator kinds: one entry per kind (see the module docs
//! of [`crate::registry`] for what else a new kind needs).

use super::{Default, Kind, Param, ParamType, Show, Value};

const fn int(min: u64, max: u64) -> ParamType {
    ParamType::Int { min, max }
}

const fn closed(min: f64, max: f64) -> ParamType {
    ParamType::Float {
        min,
        max,
        min_open: false,
        max_open: false,
    }
}

const K_REMOVE: Param = Param {
    name: "k",
    ty: int(1, u64::MAX),
    default: Default::Required {
        example: Value::Int(5),
    },
    show: Show::Always,
    doc: "number of leading principal directions to remove",
};

/// Every kind, in the order help and `bertflow kinds` list them.
pub static KINDS: &[Kind] = &[
    Kind {
        name: "none",
        doc: "identity: the uncalibrated baseline",
        moments: true,
        params: &[],
    },
    Kind {
        name: "sn",
        doc: "per-dimension standardisation (a zero-variance dimension maps to 0)",
        moments: true,
        params: &[],
    },
    Kind {
        name: "whiten",
        doc: "BERT-whitening (Su et al. 2021): centre, rotate and scale to unit covariance",
        moments: true,
        params: &[Param {
            name: "k",
            ty: int(1, u64::MAX),
            default: Default::Absent("every direction of non-zero variance"),
            show: Show::UnlessDefault,
            doc: "number of leading directions to keep",
        }],
    },
    Kind {
        name: "natsv",
        doc: "all-but-the-top (Mu & Viswanath 2018): centre, remove the top-k principal directions",
        moments: true,
        params: &[K_REMOVE],
    },
    Kind {
        name: "sn+natsv",
        doc: "standardisation, then all-but-the-top",
        moments: true,
        params: &[K_REMOVE],
    },
    Kind {
        name: "pca",
        doc: "rotation onto the principal axes in decreasing energy, optionally cut to k \
              (uncentred: a pure rotation, cosines kept)",
        moments: true,
        params: &[
            Param {
                name: "k",
                ty: int(1, u64::MAX),
                default: Default::Absent("every axis"),
                show: Show::UnlessDefault,
                doc: "number of leading axes to keep",
            },
            Param {
                name: "centre",
                ty: ParamType::Choice(&["false", "true"]),
                default: Default::Value(Value::Choice("false")),
                show: Show::UnlessDefault,
                doc: "subtract the mean (axes of the covariance) instead of rotating about 0",
            },
        ],
    },
    Kind {
        name: "softwhiten",
        doc: "soft whitening (x - mean) U diag(s'^(-alpha/2)) with eigenvalues s' shrunk towards their mean",
        moments: true,
        params: &[
            Param {
                name: "alpha",
                ty: closed(0.0, 1.0),
                default: Default::Value(Value::Float(0.5)),
                show: Show::Always,
                doc: "whitening strength (0 centres, 1 whitens)",
            },
            Param {
                name: "shrink",
                ty: closed(0.0, 1.0),
                default: Default::Value(Value::Float(0.0)),
                show: Show::Always,
                doc: "shrinkage of the eigenvalues towards their mean",
            },
            Param {
                name: "drop",
                ty: int(0, u64::MAX),
                default: Default::Value(Value::Int(0)),
                show: Show::UnlessDefault,
                doc: "leading principal directions removed first (as all-but-the-top)",
            },
            Param {
                name: "blend",
                ty: ParamType::Float {
                    min: 0.0,
                    max: 1.0,
                    min_open: false,
                    max_open: true,
                },
                default: Default::Value(Value::Float(0.0)),
                show: Show::UnlessDefault,
                doc: "weight of the raw direction mixed back in (the output keeps the input dimension)",
            },
        ],
    },
    Kind {
        name: "auto",
        doc: "decides from the fit data alone, from the identity to whitening (see `bertflow analyze`)",
        moments: false,
        params: &[],
    },
    Kind {
        name: "flow",
        doc: "BERT-flow (Li et al. 2020): a Glow normalizing flow to a standard Gaussian",
        moments: false,
        params: &[
            Param {
                name: "levels",
                ty: int(1, 16),
                default: Default::Value(Value::Int(3)),
                show: Show::Always,
                doc: "levels L",
            },
            Param {
                name: "steps",
                ty: int(1, 64),
                default: Default::Value(Value::Int(3)),
                show: Show::Always,
                doc: "steps K per level",
            },
            Param {
                name: "width",
                ty: int(1, 4096),
                default: Default::Value(Value::Int(32)),
                show: Show::Always,
                doc: "hidden width of the coupling networks",
            },
            Param {
                name: "epochs",
                ty: int(1, u64::MAX),
                default: Default::Value(Value::Int(1)),
                show: Show::Always,
                doc: "passes over the fit data",
            },
            Param {
                name: "lr",
                ty: ParamType::Float {
                    min: 0.0,
                    max: f64::INFINITY,
                    min_open: true,
                    max_open: true,
                },
                default: Default::Value(Value::Float(1e-3)),
                show: Show::Exp,
                doc: "Adam learning rate",
            },
            Param {
                name: "batch",
                ty: int(2, u64::MAX),
                default: Default::Value(Value::Int(32)),
                show: Show::Always,
                doc: "mini-batch size (the first batch initialises the actnorms)",
            },
            Param {
                name: "seed",
                ty: int(0, u64::MAX),
                default: Default::Value(Value::Int(42)),
                show: Show::Always,
                doc: "seed of the weight initialisation and the shuffling",
            },
            Param {
                name: "coupling",
                ty: ParamType::Choice(&["additive", "affine"]),
                default: Default::Value(Value::Choice("additive")),
                show: Show::Always,
                doc: "coupling layer: additive (BERT-flow's) or affine (Glow's)",
            },
            Param {
                name: "permutation",
                ty: ParamType::Choice(&["reverse", "lu"]),
                default: Default::Value(Value::Choice("reverse")),
                show: Show::Always,
                doc: "channel permutation: reverse (BERT-flow's) or lu (Glow's 1x1 convolution; slower)",
            },
        ],
    },
];
