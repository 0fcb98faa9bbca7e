//! Unit tests of the token weighting (a tiny hand-made vocabulary).
use super::*;
use crate::files::TokenizerFile;

// ids: [PAD]0 [UNK]1 [CLS]2 [SEP]3 [MASK]4 the5 cat6 sat7 .8 ##s9 !?10
const VOCAB: &str = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\n.\n##s\n!?\n";

fn tokenizer(dir: &Path) -> TextTokenizer {
    let vocab = dir.join("vocab.txt");
    std::fs::write(&vocab, VOCAB).unwrap();
    TextTokenizer::load(&TokenizerFile::Vocab {
        vocab,
        lowercase: true,
    })
    .unwrap()
}

/// Counts chosen so that uSIF's threshold is non-trivial: 50 sentences
/// of one piece each (n = 1), 7 distinct pieces seen (v = 7), threshold
/// 1 - (6/7)^1 = 1/7; `the` (30/68) and `.` (10/68) are above it, so
/// alpha = 2/7 and a = (1 - 2/7) / (2/7 * 7/2) = 5/7.
fn counts() -> TokenCounts {
    TokenCounts {
        counts: vec![0, 0, 9, 9, 0, 30, 5, 3, 10, 2, 0],
        sentences: 50,
        pieces: 50,
    }
}

#[test]
fn usif_and_sif_weights_match_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path());
    let c = counts();
    let usif = TokenWeights::new(&"usif".parse().unwrap(), Some(&c), &tok).unwrap();
    assert!((usif.usif_a.unwrap() - 5.0 / 7.0).abs() < 1e-12);
    // a / (a/2 + p): values from Python with a = 5/7, p = count / 68.
    for (id, want) in [
        (5, 0.8947368421052632),
        (6, 1.6585365853658536),
        (7, 1.7801047120418847),
        (9, 1.8478260869565217),
        (1, 2.0), // never seen: p = 0
    ] {
        assert!((usif.weight(id) as f64 - want).abs() < 1e-6, "id {id}");
    }
    // Special tokens and punctuation are dropped by default for usif.
    for id in [2, 3, 8, 10] {
        assert_eq!(usif.weight(id), 0.0, "id {id}");
    }
    let keep: WeightingSpec = "usif:special=keep,punct=keep".parse().unwrap();
    let kept = TokenWeights::new(&keep, Some(&c), &tok).unwrap();
    let p_cls = 9.0 / 68.0;
    let want = (5.0 / 7.0) / (5.0 / 14.0 + p_cls);
    assert!((kept.weight(2) as f64 - want).abs() < 1e-6);
    assert_ne!(kept.key(), usif.key());

    let sif = TokenWeights::new(&"sif:special=keep".parse().unwrap(), Some(&c), &tok).unwrap();
    for (id, want) in [
        (5, 0.0022615405081814555),
        (6, 0.013417521704814523),
        (7, 0.022164276401564535),
        (9, 0.03288201160541586),
        (2, 1e-3 / (1e-3 + 9.0 / 68.0)),
        (8, 0.0),
    ] {
        assert!((sif.weight(id) as f64 - want).abs() < 1e-7, "id {id}");
    }
    let sif2 = TokenWeights::new(&"sif:a=0.01".parse().unwrap(), Some(&c), &tok).unwrap();
    assert!((sif2.weight(5) as f64 - 0.01 / (0.01 + 30.0 / 68.0)).abs() < 1e-7);
}

#[test]
fn sentence_weights_fall_back_to_the_mean() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path());
    let w = TokenWeights::new(&"usif".parse().unwrap(), Some(&counts()), &tok).unwrap();
    let ids = tok.encode("the cat .").unwrap();
    assert_eq!(ids, vec![2, 5, 6, 8, 3]);
    let s = w.sentence(&ids);
    assert_eq!(s[0], 0.0);
    assert_eq!(s[3], 0.0);
    assert!(s[1] > 0.0 && s[2] > s[1]);
    // Only special tokens and punctuation: every weight would be 0.
    assert_eq!(w.sentence(&tok.encode(".").unwrap()), vec![1.0; 3]);
    // Plain mean: all ones, no counts needed.
    let m = TokenWeights::new(&WeightingSpec::mean(), None, &tok).unwrap();
    assert_eq!(m.sentence(&ids), vec![1.0; 5]);
    // Dropping special tokens from the mean.
    let m = TokenWeights::new(&"mean:special=drop".parse().unwrap(), None, &tok).unwrap();
    assert_eq!(m.sentence(&ids), vec![0.0, 1.0, 1.0, 1.0, 0.0]);
    assert!(TokenWeights::new(&"usif".parse().unwrap(), None, &tok).is_err());
}

#[test]
fn counting_and_freq_file_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path());
    let c = TokenCounts::count(&tok, &["the cats sat.", "The cat."]).unwrap();
    // [CLS] the cat ##s sat . [SEP] / [CLS] the cat . [SEP]
    assert_eq!(c.counts[2], 2);
    assert_eq!(c.counts[5], 2);
    assert_eq!(c.counts[6], 2);
    assert_eq!(c.counts[9], 1);
    assert_eq!(c.sentences, 2);
    assert_eq!(c.pieces, 8);
    assert_eq!(c.total(), 12);
    let path = dir.path().join("freq.tsv");
    c.write(&path, &tok).unwrap();
    assert_eq!(TokenCounts::read(&path, &tok).unwrap(), c);
    std::fs::write(&path, "#sentences\t2\nthe\t3\nzebra\t4\n").unwrap();
    let r = TokenCounts::read(&path, &tok).unwrap();
    assert_eq!((r.counts[5], r.total(), r.pieces), (3, 3, 3));
    std::fs::write(&path, "the\t3\n").unwrap();
    assert!(TokenCounts::read(&path, &tok).is_err());
    std::fs::write(&path, "#sentences\t2\nthe 3\n").unwrap();
    let e = TokenCounts::read(&path, &tok).unwrap_err().to_string();
    assert!(e.contains("line 2"), "{e}");
    std::fs::write(&path, "#sentences\t2\nthe\t-3\n").unwrap();
    assert!(TokenCounts::read(&path, &tok).is_err());
}

#[test]
fn specs_parse_display_and_reject_bad_input() {
    for s in [
        "mean",
        "sif",
        "usif",
        "sif:a=0.01,punct=keep",
        "mean:special=drop",
    ] {
        let spec: WeightingSpec = s.parse().unwrap();
        let again: WeightingSpec = spec.to_string().parse().unwrap();
        assert_eq!(spec, again, "{s} -> {spec}");
    }
    let u: WeightingSpec = "usif".parse().unwrap();
    assert!(!u.keep_special && !u.keep_punct);
    assert!(WeightingSpec::mean().is_plain_mean());
    assert!(!"mean:punct=drop"
        .parse::<WeightingSpec>()
        .unwrap()
        .is_plain_mean());
    for bad in [
        "idf",
        "usif:a=1",
        "sif:a=0",
        "sif:a=x",
        "usif:special=yes",
        "usif:punct",
        "sif:a=1,a=2",
    ] {
        assert!(bad.parse::<WeightingSpec>().is_err(), "{bad}");
    }
    assert!(is_punct(".") && is_punct("##,") && is_punct("!?"));
    assert!(!is_punct("a.") && !is_punct("[CLS]") && !is_punct("##"));
    assert!(is_special("[SEP]") && !is_special("[UNK]"));
}
