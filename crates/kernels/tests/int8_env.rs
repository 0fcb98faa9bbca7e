//! `BERTFLOW_INT8_KERNEL`: a kernel this CPU lacks and an unknown name are errors
//! that say what is available or expected. One test in its own binary, so that
//! setting the variable races no other test.
use bertflow_kernels::int8::KernelError;
use bertflow_kernels::Isa;

#[test]
fn bertflow_int8_kernel_names_a_kernel_or_is_an_error() {
    let available: Vec<_> = Isa::available_all().iter().map(|i| i.name()).collect();
    for isa in Isa::ALL {
        std::env::set_var("BERTFLOW_INT8_KERNEL", isa.name());
        match Isa::from_env() {
            Ok(got) => {
                assert!(isa.available(), "{isa:?} chosen but not available");
                assert_eq!(got, isa);
            }
            Err(e) => {
                assert!(!isa.available(), "{isa:?} is available: {e}");
                assert!(matches!(e, KernelError::Unavailable(n, _) if n == isa.name()));
                let msg = e.to_string();
                assert!(msg.contains(&format!("'{}'", isa.name())), "{msg}");
                assert!(
                    msg.ends_with(&format!("available: {}", available.join(", "))),
                    "{msg}"
                );
            }
        }
    }
    // Without AVX-VNNI (e.g. Zen 4, which has AVX512-VNNI) avxvnni is refused.
    std::env::set_var("BERTFLOW_INT8_KERNEL", "avxvnni");
    let r = Isa::from_env();
    if Isa::AvxVnni.available() {
        assert_eq!(r.unwrap(), Isa::AvxVnni);
    } else {
        let e = r.unwrap_err();
        assert!(matches!(e, KernelError::Unavailable("avxvnni", _)), "{e}");
        assert!(e.to_string().contains("available: scalar"), "{e}");
    }
    std::env::set_var("BERTFLOW_INT8_KERNEL", "bogus");
    let e = Isa::from_env().unwrap_err();
    assert!(matches!(&e, KernelError::BadName(s) if s == "bogus"), "{e}");
    let msg = e.to_string();
    for isa in Isa::ALL {
        assert!(msg.contains(isa.name()), "{msg} lacks {}", isa.name());
    }
    assert!(msg.contains("auto"), "{msg}");
    for auto in ["auto", ""] {
        std::env::set_var("BERTFLOW_INT8_KERNEL", auto);
        assert_eq!(Isa::from_env().unwrap(), Isa::best());
    }
    std::env::remove_var("BERTFLOW_INT8_KERNEL");
    assert_eq!(Isa::from_env().unwrap(), Isa::best());
}
