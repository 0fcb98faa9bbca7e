//! A pickle reader for what `torch.save` writes for a state dict (protocol 2,
//! and the framing opcodes of 4): strings, numbers, tuples, lists, dicts,
//! globals, persistent ids and calls. It executes nothing: a call is kept as a
//! [`Value::Call`] for the caller ([`super::torch`]) to interpret, except
//! `collections.OrderedDict()`, which is a dict. Any other opcode is an error
//! naming it; nesting is bounded, so no input can exhaust the stack.
use std::collections::HashMap;
use std::rc::Rc;

type Res<T> = std::result::Result<T, String>;

/// A shared node of the unpickled value graph.
pub(crate) type V = Rc<Obj>;

/// Deeper values than this are refused (a state dict needs about 6 levels).
const MAX_DEPTH: u32 = 64;

#[derive(Debug, Clone)]
pub(crate) struct Obj {
    depth: u32,
    pub value: Value,
}

#[derive(Debug, Clone)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// `module.name`, from GLOBAL or STACK_GLOBAL.
    Global(String, String),
    Tuple(Vec<V>),
    List(Vec<V>),
    Dict(Vec<(V, V)>),
    /// `callable(*args)`, not executed.
    Call(V, Vec<V>),
    /// A persistent id (torch: a storage reference).
    PersistentId(V),
}

fn obj(value: Value) -> Res<V> {
    let children = match &value {
        Value::Tuple(xs) | Value::List(xs) => xs.iter().map(|x| x.depth).max(),
        Value::Dict(kv) => kv.iter().map(|(k, v)| k.depth.max(v.depth)).max(),
        Value::Call(f, args) => args.iter().map(|x| x.depth).max().max(Some(f.depth)),
        Value::PersistentId(x) => Some(x.depth),
        _ => None,
    };
    let depth = children.map_or(0, |d| d + 1);
    if depth > MAX_DEPTH {
        return Err(format!("pickle: values nested deeper than {MAX_DEPTH}"));
    }
    Ok(Rc::new(Obj { depth, value }))
}

/// The pickle machine's state.
struct Machine<'a> {
    b: &'a [u8],
    at: usize,
    stack: Vec<V>,
    marks: Vec<usize>,
    memo: HashMap<u32, V>,
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        let s = self
            .at
            .checked_add(n)
            .and_then(|end| self.b.get(self.at..end))
            .ok_or_else(|| format!("pickle: truncated at byte {}", self.at))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Res<u8> {
        Ok(self.take(1)?[0])
    }
    fn le<const N: usize>(&mut self) -> Res<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn line(&mut self) -> Res<String> {
        let rest = &self.b[self.at.min(self.b.len())..];
        let n = rest
            .iter()
            .position(|&c| c == b'\n')
            .ok_or_else(|| format!("pickle: unterminated line at byte {}", self.at))?;
        let s = std::str::from_utf8(&rest[..n])
            .map_err(|_| format!("pickle: a name at byte {} is not UTF-8", self.at))?
            .to_string();
        self.at += n + 1;
        Ok(s)
    }
    fn string(&mut self, n: usize) -> Res<Value> {
        let s = std::str::from_utf8(self.take(n)?)
            .map_err(|_| format!("pickle: a string before byte {} is not UTF-8", self.at))?;
        Ok(Value::Str(s.to_string()))
    }
    fn pop(&mut self) -> Res<V> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(format!("pickle: stack underflow at byte {}", self.at));
        }
        self.stack
            .pop()
            .ok_or_else(|| format!("pickle: stack underflow at byte {}", self.at))
    }
    fn top(&mut self) -> Res<&mut V> {
        let at = self.at;
        self.stack
            .last_mut()
            .ok_or_else(|| format!("pickle: stack underflow at byte {at}"))
    }
    /// The items since the last MARK, which is removed.
    fn pop_mark(&mut self) -> Res<Vec<V>> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| format!("pickle: no MARK before byte {}", self.at))?;
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }
    fn pop_n(&mut self, n: usize) -> Res<Vec<V>> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() < floor + n {
            return Err(format!("pickle: stack underflow at byte {}", self.at));
        }
        Ok(self.stack.split_off(self.stack.len() - n))
    }
    fn memo_get(&self, k: u32) -> Res<V> {
        self.memo
            .get(&k)
            .cloned()
            .ok_or_else(|| format!("pickle: memo {k} read before it is written"))
    }
    fn memo_put(&mut self, k: u32) -> Res<()> {
        let v = self
            .stack
            .last()
            .cloned()
            .ok_or_else(|| format!("pickle: nothing to memoize at byte {}", self.at))?;
        self.memo.insert(k, v);
        Ok(())
    }
    /// Append `items` to the list on top of the stack.
    fn extend_list(&mut self, items: Vec<V>) -> Res<()> {
        let at = self.at;
        let o = Rc::make_mut(self.top()?);
        let Value::List(xs) = &mut o.value else {
            return Err(format!("pickle: APPEND to a non-list at byte {at}"));
        };
        let deepest = items.iter().map(|x| x.depth).max();
        xs.extend(items);
        deepen(o, deepest)
    }
    /// Set `pairs` (key, value, key, value, ...) in the dict on top of the stack.
    fn extend_dict(&mut self, pairs: Vec<V>) -> Res<()> {
        let at = self.at;
        if !pairs.len().is_multiple_of(2) {
            return Err(format!("pickle: odd SETITEMS at byte {at}"));
        }
        let o = Rc::make_mut(self.top()?);
        let Value::Dict(kv) = &mut o.value else {
            return Err(format!("pickle: SETITEM on a non-dict at byte {at}"));
        };
        let deepest = pairs.iter().map(|x| x.depth).max();
        let mut it = pairs.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            kv.push((k, v));
        }
        deepen(o, deepest)
    }
}

/// `o`'s depth after children of depth up to `deepest` were added to it.
fn deepen(o: &mut Obj, deepest: Option<u32>) -> Res<()> {
    if let Some(d) = deepest {
        o.depth = o.depth.max(d + 1);
        if o.depth > MAX_DEPTH {
            return Err(format!("pickle: values nested deeper than {MAX_DEPTH}"));
        }
    }
    Ok(())
}

/// Runs the pickle `b` and returns the value it leaves.
pub(crate) fn load(b: &[u8]) -> Res<V> {
    let mut m = Machine {
        b,
        at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    };
    loop {
        let at = m.at;
        let op = m.u8()?;
        let pushed = match op {
            0x80 => {
                let p = m.u8()?;
                if p > 5 {
                    return Err(format!("pickle: protocol {p} is not supported"));
                }
                None
            }
            0x95 => {
                m.le::<8>()?; // FRAME: a length hint
                None
            }
            b'.' => return m.pop(),
            b'(' => {
                m.marks.push(m.stack.len());
                None
            }
            b'}' => Some(Value::Dict(Vec::new())),
            b')' => Some(Value::Tuple(Vec::new())),
            b']' => Some(Value::List(Vec::new())),
            b'N' => Some(Value::None),
            0x88 => Some(Value::Bool(true)),
            0x89 => Some(Value::Bool(false)),
            b'K' => Some(Value::Int(m.u8()? as i64)),
            b'M' => Some(Value::Int(u16::from_le_bytes(m.le()?) as i64)),
            b'J' => Some(Value::Int(i32::from_le_bytes(m.le()?) as i64)),
            0x8a => {
                let n = m.u8()? as usize;
                if n > 8 {
                    return Err(format!("pickle: integer of {n} bytes at byte {at}"));
                }
                let bytes = m.take(n)?;
                let mut a = [0u8; 8];
                a[..n].copy_from_slice(bytes);
                if n > 0 && n < 8 && bytes[n - 1] & 0x80 != 0 {
                    a[n..].fill(0xff); // sign-extend
                }
                Some(Value::Int(i64::from_le_bytes(a)))
            }
            b'G' => Some(Value::Float(f64::from_be_bytes(m.le()?))),
            b'X' => {
                let n = u32::from_le_bytes(m.le()?) as usize;
                Some(m.string(n)?)
            }
            0x8c => {
                let n = m.u8()? as usize;
                Some(m.string(n)?)
            }
            0x8d => {
                let n = u64::from_le_bytes(m.le()?);
                let n = usize::try_from(n).map_err(|_| "pickle: string too long".to_string())?;
                Some(m.string(n)?)
            }
            b'c' => {
                let module = m.line()?;
                let name = m.line()?;
                Some(Value::Global(module, name))
            }
            0x93 => {
                let v = m.pop_n(2)?;
                match (&v[0].value, &v[1].value) {
                    (Value::Str(a), Value::Str(b)) => Some(Value::Global(a.clone(), b.clone())),
                    _ => return Err(format!("pickle: STACK_GLOBAL of non-strings at byte {at}")),
                }
            }
            b'q' => {
                let k = m.u8()? as u32;
                m.memo_put(k)?;
                None
            }
            b'r' => {
                let k = u32::from_le_bytes(m.le()?);
                m.memo_put(k)?;
                None
            }
            0x94 => {
                let k = m.memo.len() as u32;
                m.memo_put(k)?;
                None
            }
            b'h' => {
                let k = m.u8()? as u32;
                m.stack.push(m.memo_get(k)?);
                None
            }
            b'j' => {
                let k = u32::from_le_bytes(m.le()?);
                m.stack.push(m.memo_get(k)?);
                None
            }
            b't' => Some(Value::Tuple(m.pop_mark()?)),
            0x85..=0x87 => Some(Value::Tuple(m.pop_n((op - 0x84) as usize)?)),
            b'l' => Some(Value::List(m.pop_mark()?)),
            b'd' => {
                let items = m.pop_mark()?;
                m.stack.push(obj(Value::Dict(Vec::new()))?);
                m.extend_dict(items)?;
                None
            }
            b'a' => {
                let v = m.pop_n(1)?;
                m.extend_list(v)?;
                None
            }
            b'e' => {
                let items = m.pop_mark()?;
                m.extend_list(items)?;
                None
            }
            b's' => {
                let kv = m.pop_n(2)?;
                m.extend_dict(kv)?;
                None
            }
            b'u' => {
                let items = m.pop_mark()?;
                m.extend_dict(items)?;
                None
            }
            b'Q' => Some(Value::PersistentId(m.pop()?)),
            b'R' => {
                let v = m.pop_n(2)?;
                let args = match &v[1].value {
                    Value::Tuple(xs) => xs.clone(),
                    _ => {
                        return Err(format!(
                            "pickle: REDUCE with non-tuple arguments at byte {at}"
                        ))
                    }
                };
                match &v[0].value {
                    Value::Global(module, name)
                        if module == "collections" && name == "OrderedDict" && args.is_empty() =>
                    {
                        Some(Value::Dict(Vec::new()))
                    }
                    _ => Some(Value::Call(v[0].clone(), args)),
                }
            }
            b'b' => {
                // BUILD: only a dict's attributes (an OrderedDict's `_metadata`), dropped.
                m.pop_n(1)?;
                if !matches!(m.top()?.value, Value::Dict(_)) {
                    return Err(format!(
                        "pickle: BUILD (setting an object's state) at byte {at} is not supported"
                    ));
                }
                None
            }
            _ => {
                return Err(format!(
                    "pickle: opcode 0x{op:02x} at byte {at} is not supported (only what torch.save \
                     writes for a state dict is read)"
                ))
            }
        };
        if let Some(v) = pushed {
            m.stack.push(obj(v)?);
        }
    }
}
