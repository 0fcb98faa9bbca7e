//! Which integer micro-kernel runs: `BERTFLOW_INT8_KERNEL`, else the encoder's
//! choice by measurement ([`Isa::choose`], see [`crate::tune`]), else the rule
//! ([`Isa::best`]).
use super::{KernelError, QMAX_7BIT, QMAX_8BIT};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// [`Isa::choose`]'s kernel: 0 for none, else its index in [`Isa::ALL`] plus 1.
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// Instruction set of the integer micro-kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust (any CPU); 8-bit activations.
    Scalar,
    /// `vpmaddubsw` + `vpmaddwd` on 256-bit registers; 7-bit activations.
    Avx2,
    /// AVX-VNNI: VEX `vpdpbusd` on 256-bit registers (CPUs with AVX-VNNI but no
    /// AVX-512: Alder Lake and later client cores, Zen 5 client); a tile of 6 rows
    /// x one 16-channel panel, the block's 4 panels in turn; 8-bit activations.
    AvxVnni,
    /// AVX512-VNNI: `vpdpbusd` on 512-bit registers, a tile of 6 rows x 64
    /// channels; 8-bit activations.
    Avx512Vnni,
}

impl Isa {
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }

    /// Largest activation code this kernel takes: 127 for AVX2 (its `vpmaddubsw`
    /// sums pairs of products in i16, exact only for 7-bit codes), 255 for the
    /// kernels that accumulate in i32 without saturation (VNNI, portable).
    pub fn act_max(self) -> i32 {
        match self {
            Isa::Avx2 => QMAX_7BIT,
            Isa::Scalar | Isa::AvxVnni | Isa::Avx512Vnni => QMAX_8BIT,
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("avxvnni")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every kernel this CPU can run.
    pub fn available_all() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.available()).collect()
    }

    /// The rule, used where the kernels were not measured (see [`crate::tune`]):
    /// AVX512-VNNI, AVX-VNNI, AVX2, portable.
    pub fn best() -> Isa {
        [Isa::Avx512Vnni, Isa::AvxVnni, Isa::Avx2]
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Scalar)
    }

    /// The kernel of this name (`scalar`, `avx2`, `avxvnni`, `avx512vnni`).
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == name)
    }

    /// `BERTFLOW_INT8_KERNEL` (auto, scalar, avx2, avxvnni, avx512vnni), else the best;
    /// an error when the named kernel is unknown or not supported by this CPU.
    pub fn from_env() -> Result<Isa, KernelError> {
        Ok(Isa::env_override()?.unwrap_or_else(Isa::best))
    }

    /// The kernel `BERTFLOW_INT8_KERNEL` names (`None` when unset, empty or
    /// `auto`); an error when it is unknown or not supported by this CPU.
    pub fn env_override() -> Result<Option<Isa>, KernelError> {
        match std::env::var("BERTFLOW_INT8_KERNEL") {
            Ok(s) if !s.is_empty() && s != "auto" => {
                let isa = Isa::from_name(&s).ok_or(KernelError::BadName(s))?;
                isa.check()?;
                Ok(Some(isa))
            }
            _ => Ok(None),
        }
    }

    /// The kernel int8 models use: `BERTFLOW_INT8_KERNEL` (read once per
    /// process), else the one given to [`Isa::choose`] (the encoder's choice by
    /// measurement), else [`Isa::best`].
    pub fn selected() -> Result<Isa, KernelError> {
        static ENV: OnceLock<Result<Option<Isa>, String>> = OnceLock::new();
        match ENV.get_or_init(|| Isa::env_override().map_err(|e| e.to_string())) {
            Ok(Some(i)) => Ok(*i),
            Ok(None) => Ok(Isa::chosen().unwrap_or_else(Isa::best)),
            Err(_) => Isa::from_env(),
        }
    }

    /// Make `self` the kernel of int8 models loaded from now on in this process
    /// (unless `BERTFLOW_INT8_KERNEL` names one); an error if this CPU lacks it.
    pub fn choose(self) -> Result<(), KernelError> {
        self.check()?;
        let i = Isa::ALL.iter().position(|&p| p == self).unwrap_or(0);
        CHOSEN.store(i as u8 + 1, Ordering::Relaxed);
        Ok(())
    }

    /// The kernel given to [`Isa::choose`], if any.
    pub fn chosen() -> Option<Isa> {
        match CHOSEN.load(Ordering::Relaxed) {
            0 => None,
            i => Isa::ALL.get(i as usize - 1).copied(),
        }
    }

    /// An error unless this CPU can run the kernel.
    pub fn check(self) -> Result<(), KernelError> {
        if self.available() {
            return Ok(());
        }
        let names: Vec<_> = Isa::available_all().iter().map(|i| i.name()).collect();
        Err(KernelError::Unavailable(self.name(), names.join(", ")))
    }
}
