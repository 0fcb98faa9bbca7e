//! The process's kernel: `BERTFLOW_FP32_KERNEL` beats [`Path::choose`], which
//! beats the rule; [`Isa::choose`] sets the int8 kernel where no variable is
//! set; a kernel this CPU lacks cannot be chosen. One test in its own binary:
//! the variables are read once per process.
use bertflow_kernels::fp32::{PackedLinear, Path};
use bertflow_kernels::Isa;

#[test]
fn env_beats_choice_beats_rule() {
    // fp32: the variable names the portable kernel (every CPU has it), set
    // before the first read.
    std::env::set_var("BERTFLOW_FP32_KERNEL", "scalar");
    std::env::remove_var("BERTFLOW_INT8_KERNEL");
    assert_eq!(Path::chosen(), None);
    assert_eq!(Path::selected().unwrap(), Path::Scalar);
    let other = *Path::available_all().last().unwrap();
    Path::choose(other).unwrap();
    assert_eq!(Path::chosen(), Some(other));
    assert_eq!(Path::selected().unwrap(), Path::Scalar, "the variable wins");
    let lin = PackedLinear::new(&[1.0, 2.0], &[0.5], 1, 2).unwrap();
    assert_eq!(lin.path(), Path::Scalar);

    // int8: no variable, so the rule until a choice, then the choice.
    assert_eq!(Isa::selected().unwrap(), Isa::best());
    Isa::choose(Isa::Scalar).unwrap();
    assert_eq!(Isa::selected().unwrap(), Isa::Scalar);
    let last = *Isa::available_all().last().unwrap();
    Isa::choose(last).unwrap();
    assert_eq!(Isa::selected().unwrap(), last);

    // A kernel this CPU lacks is refused and changes nothing.
    if let Some(&missing) = Isa::ALL.iter().find(|i| !i.available()) {
        assert!(Isa::choose(missing).is_err());
        assert_eq!(Isa::selected().unwrap(), last);
    }
    if let Some(&missing) = Path::ALL.iter().find(|p| !p.available()) {
        assert!(Path::choose(missing).is_err());
        assert_eq!(Path::chosen(), Some(other));
    }
}
