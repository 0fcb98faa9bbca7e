//! candle custom operations of the candle forward pass: fused CPU epilogues
//! (bias + activation, bias + residual) and the int8 linear layer.
use bertflow_kernels::{Act, Isa, QuantLinear};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, InplaceOp1, InplaceOp2, Layout, Shape};

fn not_f32(op: &str) -> candle_core::Error {
    candle_core::Error::Msg(format!("{op}: expected a contiguous f32 tensor"))
}

/// In place: each row `+= bias`, then the activation.
pub(super) struct BiasAct<'a> {
    pub(super) bias: &'a [f32],
    pub(super) act: Act,
}

impl InplaceOp1 for BiasAct<'_> {
    fn name(&self) -> &'static str {
        "bias-act"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let (CpuStorage::F32(v), Some((start, end))) = (storage, layout.contiguous_offsets())
        else {
            return Err(not_f32(self.name()));
        };
        let d = self.bias.len();
        let v = &mut v[start..end];
        if d == 0 || !v.len().is_multiple_of(d) {
            return Err(not_f32(self.name()));
        }
        for row in v.chunks_exact_mut(d) {
            for (x, &b) in row.iter_mut().zip(self.bias) {
                *x += b;
            }
        }
        self.act.apply(v);
        Ok(())
    }
}

/// In place: each row `+= bias + residual row`.
pub(super) struct BiasResidual<'a> {
    pub(super) bias: &'a [f32],
}

impl InplaceOp2 for BiasResidual<'_> {
    fn name(&self) -> &'static str {
        "bias-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let (CpuStorage::F32(v), CpuStorage::F32(r), Some((start, end)), Some((rstart, rend))) =
            (s1, s2, l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            return Err(not_f32(self.name()));
        };
        let d = self.bias.len();
        let (v, r) = (&mut v[start..end], &r[rstart..rend]);
        if d == 0 || !v.len().is_multiple_of(d) || v.len() != r.len() {
            return Err(not_f32(self.name()));
        }
        for (row, res) in v.chunks_exact_mut(d).zip(r.chunks_exact(d)) {
            for ((x, &b), &y) in row.iter_mut().zip(self.bias).zip(res) {
                *x += b + y;
            }
        }
        Ok(())
    }
}

/// `act(x Wq^T + b [+ residual])` through bertflow-kernels' int8 layer.
pub(super) struct Int8Linear<'a> {
    pub(super) lin: &'a QuantLinear,
    pub(super) isa: Isa,
    pub(super) act: Act,
}

impl Int8Linear<'_> {
    fn run(
        &self,
        x: &CpuStorage,
        lx: &Layout,
        res: Option<(&CpuStorage, &Layout)>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(x), Some((start, end))) = (x, lx.contiguous_offsets()) else {
            return Err(not_f32("int8-linear"));
        };
        let x = &x[start..end];
        let (k, n) = (self.lin.in_dim(), self.lin.out_dim());
        if lx.dims().last() != Some(&k) {
            return Err(not_f32("int8-linear"));
        }
        let m = x.len() / k;
        let residual = match res {
            None => None,
            Some((CpuStorage::F32(r), l)) => {
                let (rs, re) = l
                    .contiguous_offsets()
                    .ok_or_else(|| not_f32("int8-linear residual"))?;
                Some(&r[rs..re])
            }
            Some(_) => return Err(not_f32("int8-linear residual")),
        };
        let mut out = vec![0f32; m * n];
        self.lin
            .forward(self.isa, x, m, residual, self.act, &mut out)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let mut dims = lx.dims().to_vec();
        *dims.last_mut().expect("checked above") = n;
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}

impl CustomOp1 for Int8Linear<'_> {
    fn name(&self) -> &'static str {
        "int8-linear"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run(s, l, None)
    }
}

impl CustomOp2 for Int8Linear<'_> {
    fn name(&self) -> &'static str {
        "int8-linear-residual"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run(s1, l1, Some((s2, l2)))
    }
}
