//! `BERTFLOW_FP32_KERNEL`: each name picks its kernel where this CPU has it; a
//! kernel this CPU lacks and an unknown name are errors that say what is available
//! or expected; `auto` or nothing is the best. One test in its own binary, so that
//! setting the variable races no other test.
use bertflow_kernels::fp32::{Fp32Error, Path};

#[test]
fn bertflow_fp32_kernel_names_a_kernel_or_is_an_error() {
    let available: Vec<_> = Path::available_all().iter().map(|p| p.name()).collect();
    for path in Path::ALL {
        std::env::set_var("BERTFLOW_FP32_KERNEL", path.name());
        match Path::from_env() {
            Ok(got) => {
                assert!(path.available(), "{path:?} chosen but not available");
                assert_eq!(got, path);
            }
            Err(e) => {
                assert!(!path.available(), "{path:?} is available: {e}");
                assert!(matches!(e, Fp32Error::Unavailable(n, _) if n == path.name()));
                let msg = e.to_string();
                assert!(msg.contains(&format!("'{}'", path.name())), "{msg}");
                assert!(
                    msg.ends_with(&format!("available: {}", available.join(", "))),
                    "{msg}"
                );
            }
        }
    }
    std::env::set_var("BERTFLOW_FP32_KERNEL", "bogus");
    let e = Path::from_env().unwrap_err();
    assert!(matches!(&e, Fp32Error::BadName(s) if s == "bogus"), "{e}");
    let msg = e.to_string();
    for path in Path::ALL {
        assert!(msg.contains(path.name()), "{msg} lacks {}", path.name());
    }
    assert!(msg.contains("auto"), "{msg}");
    for auto in ["auto", ""] {
        std::env::set_var("BERTFLOW_FP32_KERNEL", auto);
        assert_eq!(Path::from_env().unwrap(), Path::best());
    }
    std::env::remove_var("BERTFLOW_FP32_KERNEL");
    assert_eq!(Path::from_env().unwrap(), Path::best());
    // The pair kernel is the default exactly on AVX-512 CPUs from AMD Zen 4 on
    // (as /proc/cpuinfo tells, where there is one).
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        let field = |name: &str| {
            info.lines()
                .find(|l| l.split(':').next().is_some_and(|f| f.trim() == name))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let zen4_on = field("vendor_id") == "AuthenticAMD"
            && field("cpu family").parse::<u32>().is_ok_and(|f| f >= 25)
            && field("flags").split(' ').any(|f| f == "avx512f");
        assert_eq!(
            Path::best() == Path::Avx512Pair,
            zen4_on,
            "{}",
            field("model name")
        );
    }
}
