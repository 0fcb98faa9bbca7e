//! The few parts of the zip format that `torch.save` archives use: the central
//! directory (zip64 included) and stored, uncompressed entries. Every field is
//! checked against the buffer; a compressed entry is refused by name.

/// One stored entry: its name and where its bytes lie in the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: String,
    pub start: usize,
    pub len: usize,
}

type Res<T> = std::result::Result<T, String>;

const EOCD: u32 = 0x0605_4b50;
const EOCD64: u32 = 0x0606_4b50;
const LOCATOR64: u32 = 0x0706_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

/// Little-endian reads at checked offsets.
struct At<'a>(&'a [u8]);

impl At<'_> {
    fn bytes(&self, at: usize, n: usize) -> Res<&[u8]> {
        at.checked_add(n)
            .and_then(|end| self.0.get(at..end))
            .ok_or_else(|| format!("zip: truncated ({n} bytes at offset {at} are past the end)"))
    }
    fn u16(&self, at: usize) -> Res<u16> {
        Ok(u16::from_le_bytes(
            self.bytes(at, 2)?.try_into().unwrap_or_default(),
        ))
    }
    fn u32(&self, at: usize) -> Res<u32> {
        Ok(u32::from_le_bytes(
            self.bytes(at, 4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&self, at: usize) -> Res<u64> {
        Ok(u64::from_le_bytes(
            self.bytes(at, 8)?.try_into().unwrap_or_default(),
        ))
    }
    fn usize(&self, at: usize) -> Res<usize> {
        usize::try_from(self.u64(at)?).map_err(|_| "zip: offset too large".to_string())
    }
}

/// Where the central directory lies and how many entries it has.
fn directory(b: &At) -> Res<(usize, usize)> {
    let len = b.0.len();
    if len < 22 {
        return Err("zip: too short to be an archive".into());
    }
    // The end record is the last 22 bytes plus a comment of up to 64 KiB.
    let lowest = len.saturating_sub(22 + 0xffff);
    let eocd = (lowest..=len - 22)
        .rev()
        .find(|&i| b.u32(i) == Ok(EOCD))
        .ok_or("zip: no end of central directory record (not a zip archive, or truncated)")?;
    let entries = b.u16(eocd + 10)? as usize;
    let offset = b.u32(eocd + 16)? as usize;
    if entries != 0xffff && offset != 0xffff_ffff {
        return Ok((offset, entries));
    }
    // zip64: a locator just before the end record points at the zip64 record.
    let loc = eocd.checked_sub(20).ok_or("zip: zip64 locator missing")?;
    if b.u32(loc)? != LOCATOR64 {
        return Err("zip: zip64 locator missing".into());
    }
    let rec = b.usize(loc + 8)?;
    if b.u32(rec)? != EOCD64 {
        return Err("zip: bad zip64 end of central directory record".into());
    }
    Ok((b.usize(rec + 48)?, b.usize(rec + 32)?))
}

/// The stored entries of the archive `buf`, in directory order.
pub(crate) fn entries(buf: &[u8]) -> Res<Vec<Entry>> {
    let b = At(buf);
    let (mut at, n) = directory(&b)?;
    // Each directory record takes at least 46 bytes: a count that cannot fit is a lie.
    if n > buf.len() / 46 {
        return Err(format!(
            "zip: {n} entries cannot fit in {} bytes",
            buf.len()
        ));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        if b.u32(at)? != CENTRAL {
            return Err(format!("zip: bad central directory record at offset {at}"));
        }
        let flags = b.u16(at + 8)?;
        let method = b.u16(at + 10)?;
        let mut csize = b.u32(at + 20)? as u64;
        let mut size = b.u32(at + 24)? as u64;
        let name_len = b.u16(at + 28)? as usize;
        let extra_len = b.u16(at + 30)? as usize;
        let comment_len = b.u16(at + 32)? as usize;
        let mut local = b.u32(at + 42)? as u64;
        let name = String::from_utf8(b.bytes(at + 46, name_len)?.to_vec())
            .map_err(|_| format!("zip: entry name at offset {at} is not UTF-8"))?;
        // zip64 extra field: the 8-byte values of the fields saturated above, in order.
        let extra = b.bytes(at + 46 + name_len, extra_len)?;
        let mut i = 0;
        while i + 4 <= extra.len() {
            let e = At(extra);
            let (id, size_of) = (e.u16(i)?, e.u16(i + 2)? as usize);
            if id == 1 {
                let mut j = i + 4;
                for field in [&mut size, &mut csize, &mut local] {
                    if *field == 0xffff_ffff {
                        *field = e.u64(j)?;
                        j += 8;
                    }
                }
            }
            i += 4 + size_of;
        }
        if method != 0 {
            return Err(format!(
                "zip: entry {name} is compressed (method {method}); torch.save stores entries \
                 uncompressed, and only those are read"
            ));
        }
        if flags & 1 != 0 {
            return Err(format!("zip: entry {name} is encrypted"));
        }
        if csize != size {
            return Err(format!("zip: stored entry {name} has two sizes"));
        }
        let local = usize::try_from(local).map_err(|_| "zip: offset too large".to_string())?;
        if b.u32(local)? != LOCAL {
            return Err(format!("zip: bad local header of {name} at offset {local}"));
        }
        let start = local + 30 + b.u16(local + 26)? as usize + b.u16(local + 28)? as usize;
        let len = usize::try_from(size).map_err(|_| "zip: entry too large".to_string())?;
        b.bytes(start, len)
            .map_err(|_| format!("zip: entry {name} runs past the end of the archive"))?;
        out.push(Entry { name, start, len });
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(out)
}
