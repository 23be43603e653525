//! A small JSON Schema validator for tool-call arguments. It implements the subset of draft 2020-12 (with the
//! draft-07 spellings `definitions`, `dependencies`, array-form `items` and `additionalItems`) that tool input
//! schemas use: `type`, `enum`, `const`, object keywords (`properties`, `required`, `additionalProperties`,
//! `propertyNames`, `min/maxProperties`, `dependentRequired`, `dependentSchemas`), array keywords (`items`,
//! `prefixItems`, `min/maxItems`, `uniqueItems`, `contains`, `min/maxContains`), numeric and string bounds,
//! `allOf`/`anyOf`/`oneOf`/`not`, `if`/`then`/`else`, and local `$ref` pointers (`#`, `#/$defs/x`, ...). We wrote
//! it because the general-purpose crates are too big for our WebAssembly size budget (jsonschema ≈ 933 KiB gzip,
//! boon ≈ 508 KiB gzip). `pattern`, `patternProperties` and `format` are accepted but NOT checked, since regex
//! support would cost ~400 KiB of wasm; when `patternProperties` is present, `additionalProperties` is not
//! enforced either (we cannot tell which keys the patterns would match). Annotations and unknown keywords are
//! ignored. While validating, `$ref` chains are followed at most 64 deep (so recursive schemas work for instances
//! up to that nesting) and subschemas nest at most 256 deep; only the first 10 errors are reported.

use crate::core::wire::json_text;
use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

const TYPES: [&str; 7] = ["null", "boolean", "object", "array", "number", "string", "integer"];
const MAX_REF_DEPTH: usize = 64;
const MAX_NESTING: usize = 256;
const MAX_ERRORS: usize = 10;

/// (`$ref` hops, total subschema nesting) while validating.
type Depth = (usize, usize);
/// Inclusive (min, max) count bounds.
type Bounds = (Option<u64>, Option<u64>);

/// A compiled JSON Schema (subset: see module docs).
#[derive(Clone, Debug)]
pub struct Schema {
    nodes: Vec<Node>,
}

/// One compiled (sub)schema; child schemas are indices into `Schema::nodes`.
#[derive(Clone, Debug, Default)]
struct Node {
    never: bool,
    reference: Option<usize>,
    types: u8,
    enumeration: Option<Vec<Value>>,
    constant: Option<Value>,
    properties: BTreeMap<String, usize>,
    pattern_props: bool,
    required: Vec<String>,
    additional: Option<usize>,
    property_names: Option<usize>,
    props: Bounds,
    dep_required: Vec<(String, Vec<String>)>,
    dep_schemas: Vec<(String, usize)>,
    prefix: Vec<usize>,
    items: Option<usize>,
    item_count: Bounds,
    unique: bool,
    contains: Option<usize>,
    contains_count: Bounds,
    minimum: Option<Number>,
    maximum: Option<Number>,
    exclusive_min: Option<Number>,
    exclusive_max: Option<Number>,
    multiple_of: Option<Number>,
    len: Bounds,
    all_of: Vec<usize>,
    any_of: Vec<usize>,
    one_of: Vec<usize>,
    not: Option<usize>,
    cond: Option<(usize, Option<usize>, Option<usize>)>,
}

/// Compiles from a work list (no recursion, so deep schemas cannot overflow the stack).
struct Compiler<'a> {
    root: &'a Value,
    nodes: Vec<Node>,
    seen: HashMap<String, usize>,
    queue: Vec<(usize, &'a Value, String)>,
}

fn bad(path: &str, kw: &str, what: &str) -> String {
    format!("#{path}: \"{kw}\" must be {what}")
}

impl<'a> Compiler<'a> {
    /// Index of the schema `v` at JSON pointer `path` of the root, queued for compilation on first sight (memoised
    /// by path, so reference cycles terminate).
    fn node(&mut self, v: &'a Value, path: String) -> usize {
        if let Some(&i) = self.seen.get(&path) {
            return i;
        }
        let idx = self.nodes.len();
        self.nodes.push(Node::default());
        self.seen.insert(path.clone(), idx);
        self.queue.push((idx, v, path));
        idx
    }

    fn run(&mut self) -> Result<(), String> {
        while let Some((idx, v, path)) = self.queue.pop() {
            let node = match v {
                Value::Bool(b) => Node { never: !b, ..Node::default() },
                Value::Object(m) => self.keywords(m, &path)?,
                _ => return Err(format!("#{path}: schema must be an object or a boolean")),
            };
            if let Some(slot) = self.nodes.get_mut(idx) {
                *slot = node;
            }
        }
        Ok(())
    }

    fn list(&mut self, v: &'a Value, path: &str, kw: &str) -> Result<Vec<usize>, String> {
        let arr = v.as_array().ok_or_else(|| bad(path, kw, "an array of schemas"))?;
        Ok(arr.iter().enumerate().map(|(i, s)| self.node(s, format!("{path}/{kw}/{i}"))).collect())
    }

    fn map(&mut self, v: &'a Value, path: &str, kw: &str) -> Result<Vec<(String, usize)>, String> {
        let obj = v.as_object().ok_or_else(|| bad(path, kw, "an object of schemas"))?;
        Ok(obj.iter().map(|(k, s)| (k.clone(), self.node(s, format!("{path}/{kw}/{}", escape(k))))).collect())
    }

    fn reference(&mut self, r: &str, path: &str) -> Result<usize, String> {
        let not_local = || format!("#{path}: $ref \"{r}\" is not a local JSON pointer (expected \"#\" or \"#/...\")");
        let ptr = percent_decode(r.strip_prefix('#').ok_or_else(not_local)?).ok_or_else(not_local)?;
        if !ptr.is_empty() && !ptr.starts_with('/') {
            return Err(not_local());
        }
        let target = self.root.pointer(&ptr).ok_or_else(|| format!("#{path}: $ref \"{r}\" points nowhere"))?;
        Ok(self.node(target, ptr))
    }

    fn keywords(&mut self, m: &'a Map<String, Value>, path: &str) -> Result<Node, String> {
        let mut n = Node::default();
        let (mut tuple, mut prefix, mut rest, mut extra) = (None, None, None, None);
        let (mut cond, mut then, mut els, mut excl_min, mut excl_max) = (None, None, None, false, false);
        for (kw, v) in m {
            let k = kw.as_str();
            let num = || match v {
                Value::Number(x) => Ok(Some(x.clone())),
                _ => Err(bad(path, k, "a number")),
            };
            let count = || uint(v).map(Some).ok_or_else(|| bad(path, k, "a non-negative integer"));
            let one = |c: &mut Self| Ok::<_, String>(Some(c.node(v, format!("{path}/{k}"))));
            let nonempty = |c: &mut Self| match c.list(v, path, k)? {
                l if l.is_empty() => Err(bad(path, k, "a non-empty array of schemas")),
                l => Ok(l),
            };
            match k {
                "$ref" => n.reference = Some(self.reference(v.as_str().ok_or_else(|| bad(path, k, "a string"))?, path)?),
                "type" => {
                    n.types = type_mask(v).ok_or_else(|| {
                        bad(path, k, "a type name or non-empty array of type names (null, boolean, object, array, number, string, integer)")
                    })?
                }
                "enum" => n.enumeration = Some(v.as_array().ok_or_else(|| bad(path, k, "an array"))?.clone()),
                "const" => n.constant = Some(v.clone()),
                "properties" => n.properties.extend(self.map(v, path, k)?),
                "patternProperties" => n.pattern_props = v.as_object().is_some_and(|o| !o.is_empty()),
                "$defs" | "definitions" => drop(self.map(v, path, k)?),
                "required" => n.required = strings(v).ok_or_else(|| bad(path, k, "an array of strings"))?,
                "additionalProperties" => n.additional = one(self)?,
                "propertyNames" => n.property_names = one(self)?,
                "minProperties" => n.props.0 = count()?,
                "maxProperties" => n.props.1 = count()?,
                "dependentSchemas" => n.dep_schemas.extend(self.map(v, path, k)?),
                "dependentRequired" | "dependencies" => {
                    let obj = v.as_object().ok_or_else(|| bad(path, k, "an object"))?;
                    for (name, dep) in obj {
                        if let Some(list) = strings(dep) {
                            n.dep_required.push((name.clone(), list));
                        } else if k == "dependencies" {
                            let sub = self.node(dep, format!("{path}/{k}/{}", escape(name)));
                            n.dep_schemas.push((name.clone(), sub));
                        } else {
                            return Err(bad(path, k, "an object of string arrays"));
                        }
                    }
                }
                "items" if v.is_array() => tuple = Some(self.list(v, path, k)?),
                "items" => rest = one(self)?,
                "prefixItems" => prefix = Some(self.list(v, path, k)?),
                "additionalItems" => extra = one(self)?,
                "minItems" => n.item_count.0 = count()?,
                "maxItems" => n.item_count.1 = count()?,
                "uniqueItems" => n.unique = v.as_bool().ok_or_else(|| bad(path, k, "a boolean"))?,
                "contains" => n.contains = one(self)?,
                "minContains" => n.contains_count.0 = count()?,
                "maxContains" => n.contains_count.1 = count()?,
                "minimum" => n.minimum = num()?,
                "maximum" => n.maximum = num()?,
                "exclusiveMinimum" if v.is_boolean() => excl_min = v.as_bool() == Some(true),
                "exclusiveMaximum" if v.is_boolean() => excl_max = v.as_bool() == Some(true),
                "exclusiveMinimum" => n.exclusive_min = num()?,
                "exclusiveMaximum" => n.exclusive_max = num()?,
                "multipleOf" => match num()? {
                    Some(x) if x.as_f64().is_some_and(|f| f > 0.0) => n.multiple_of = Some(x),
                    _ => return Err(bad(path, k, "a number greater than 0")),
                },
                "minLength" => n.len.0 = count()?,
                "maxLength" => n.len.1 = count()?,
                "allOf" => n.all_of = nonempty(self)?,
                "anyOf" => n.any_of = nonempty(self)?,
                "oneOf" => n.one_of = nonempty(self)?,
                "not" => n.not = one(self)?,
                "if" => cond = one(self)?,
                "then" => then = one(self)?,
                "else" => els = one(self)?,
                _ => {} // annotations (title, description, format, pattern, ...) and unknown keywords
            }
        }
        // Draft-04 boolean exclusiveMinimum/exclusiveMaximum turn minimum/maximum exclusive.
        if excl_min && n.exclusive_min.is_none() {
            n.exclusive_min = n.minimum.take();
        }
        if excl_max && n.exclusive_max.is_none() {
            n.exclusive_max = n.maximum.take();
        }
        (n.prefix, n.items) = match tuple {
            Some(t) => (t, extra),
            None => (prefix.unwrap_or_default(), rest),
        };
        n.cond = cond.map(|c| (c, then, els));
        Ok(n)
    }
}

/// Collects at most `cap` errors.
struct Sink {
    out: Vec<String>,
    cap: usize,
}

impl Sink {
    fn full(&self) -> bool {
        self.out.len() >= self.cap
    }
    fn fail(&mut self, ptr: &str, msg: impl std::fmt::Display) {
        if !self.full() {
            self.out.push(format!("{}: {msg}", if ptr.is_empty() { "(root)" } else { ptr }));
        }
    }
    /// Reports `got` outside `[min, max]` using the unit name (singular, plural).
    fn bounds(&mut self, ptr: &str, got: u64, (min, max): Bounds, unit: (&str, &str)) {
        let name = |n: u64| if n == 1 { unit.0 } else { unit.1 };
        if let Some(lo) = min.filter(|&lo| got < lo) {
            self.fail(ptr, format!("expected at least {lo} {}, got {got}", name(lo)));
        }
        if let Some(hi) = max.filter(|&hi| got > hi) {
            self.fail(ptr, format!("expected at most {hi} {}, got {got}", name(hi)));
        }
    }
}

impl Schema {
    /// Compiles a schema. Errors (as a message) for malformed schemas: wrong keyword value types, unknown `type`
    /// names, or a `$ref` that is not a local JSON pointer (`#`, `#/$defs/x`, ...) or points nowhere. The boolean
    /// schemas `true` and `false` are valid.
    pub fn compile(schema: &Value) -> Result<Schema, String> {
        let mut c = Compiler { root: schema, nodes: Vec::new(), seen: HashMap::new(), queue: Vec::new() };
        c.node(schema, String::new());
        c.run()?;
        Ok(Schema { nodes: c.nodes })
    }

    /// Validates an instance. On failure returns up to 10 human-readable errors, each prefixed by the JSON pointer
    /// of the offending instance location (`(root)` for the root), e.g. `/items/0/name: expected string, got number`.
    pub fn validate(&self, instance: &Value) -> Result<(), Vec<String>> {
        let mut sink = Sink { out: Vec::new(), cap: MAX_ERRORS };
        self.check(0, instance, "", (0, 0), &mut sink);
        if sink.out.is_empty() {
            Ok(())
        } else {
            Err(sink.out)
        }
    }

    /// Convenience for the tests: true when `instance` is valid.
    #[cfg(test)]
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.matches(0, instance, "", (0, 0))
    }

    fn matches(&self, i: usize, v: &Value, ptr: &str, d: Depth) -> bool {
        let mut sink = Sink { out: Vec::new(), cap: 1 };
        self.check(i, v, ptr, d, &mut sink);
        sink.out.is_empty()
    }

    fn is_false(&self, i: usize) -> bool {
        self.nodes.get(i).is_some_and(|n| n.never)
    }

    fn check(&self, i: usize, v: &Value, ptr: &str, d: Depth, s: &mut Sink) {
        let Some(n) = self.nodes.get(i) else { return };
        if s.full() {
            return;
        }
        if d.1 >= MAX_NESTING {
            return s.fail(ptr, "schema recursion too deep");
        }
        let d = (d.0, d.1 + 1);
        if n.never {
            return s.fail(ptr, "no value is allowed here");
        }
        if let Some(r) = n.reference {
            if d.0 >= MAX_REF_DEPTH {
                return s.fail(ptr, "schema recursion too deep");
            }
            self.check(r, v, ptr, (d.0 + 1, d.1), s);
        }
        let (bits, name) = type_of(v);
        if n.types != 0 && n.types & bits == 0 {
            let names: Vec<&str> =
                TYPES.iter().enumerate().filter(|(b, _)| n.types & (1 << b) != 0).map(|t| *t.1).collect();
            return s.fail(ptr, format!("expected {}, got {}", names.join(" or "), name));
        }
        if let Some(e) = n.enumeration.as_ref().filter(|e| !e.iter().any(|c| json_eq(c, v))) {
            // Ignored: a list of `Value`s always serialises.
            s.fail(ptr, format!("value must be one of {}", serde_json::to_string(e).unwrap_or_default()));
        }
        if let Some(c) = n.constant.as_ref().filter(|c| !json_eq(c, v)) {
            s.fail(ptr, format!("value must be equal to {}", json_text(c)));
        }
        match v {
            Value::Object(m) => self.check_object(n, v, m, ptr, d, s),
            Value::Array(a) => self.check_array(n, a, ptr, d, s),
            Value::String(st) => s.bounds(ptr, st.chars().count() as u64, n.len, ("character", "characters")),
            Value::Number(x) => {
                let rules = [
                    (&n.minimum, Ordering::Less, false, ">="),
                    (&n.maximum, Ordering::Greater, false, "<="),
                    (&n.exclusive_min, Ordering::Less, true, ">"),
                    (&n.exclusive_max, Ordering::Greater, true, "<"),
                ];
                for (lim, bad, strict, op) in rules {
                    let fails = |l: &&Number| matches!(num_cmp(x, l), o if o == bad || (strict && o.is_eq()));
                    if let Some(l) = lim.as_ref().filter(fails) {
                        s.fail(ptr, format!("must be {op} {l}"));
                    }
                }
                if let Some(m) = n.multiple_of.as_ref().filter(|m| !is_multiple(x, m)) {
                    s.fail(ptr, format!("must be a multiple of {m}"));
                }
            }
            _ => {}
        }
        for &sub in &n.all_of {
            self.check(sub, v, ptr, d, s);
        }
        if !n.any_of.is_empty() && !n.any_of.iter().any(|&sub| self.matches(sub, v, ptr, d)) {
            s.fail(ptr, "does not match any of the allowed schemas (anyOf)");
        }
        if !n.one_of.is_empty() {
            let hits: Vec<usize> = n
                .one_of
                .iter()
                .enumerate()
                .filter(|(_, &sub)| self.matches(sub, v, ptr, d))
                .map(|h| h.0)
                .take(2)
                .collect();
            match hits.as_slice() {
                [] => s.fail(ptr, "does not match any of the allowed schemas (oneOf)"),
                [_] => {}
                [a, b, ..] => s.fail(ptr, format!("must match exactly one schema (oneOf), but matches {a} and {b}")),
            }
        }
        if n.not.is_some_and(|sub| self.matches(sub, v, ptr, d)) {
            s.fail(ptr, "must not match the schema in \"not\"");
        }
        if let Some((c, then, els)) = n.cond {
            if let Some(next) = if self.matches(c, v, ptr, d) { then } else { els } {
                self.check(next, v, ptr, d, s);
            }
        }
    }

    fn check_object(&self, n: &Node, v: &Value, m: &Map<String, Value>, ptr: &str, d: Depth, s: &mut Sink) {
        for r in n.required.iter().filter(|r| !m.contains_key(*r)) {
            s.fail(ptr, format!("missing required property {}", json_text(&Value::String(r.clone()))));
        }
        s.bounds(ptr, m.len() as u64, n.props, ("property", "properties"));
        for (name, deps) in n.dep_required.iter().filter(|dep| m.contains_key(&dep.0)) {
            for missing in deps.iter().filter(|dep| !m.contains_key(*dep)) {
                s.fail(
                    ptr,
                    format!(
                        "property {} requires property {}",
                        json_text(&Value::String(name.clone())),
                        json_text(&Value::String(missing.clone()))
                    ),
                );
            }
        }
        for (_, sub) in n.dep_schemas.iter().filter(|dep| m.contains_key(&dep.0)) {
            self.check(*sub, v, ptr, d, s);
        }
        for (k, val) in m {
            if s.full() {
                break;
            }
            let child = format!("{ptr}/{}", escape(k));
            if let Some(&p) = n.properties.get(k) {
                self.check(p, val, &child, d, s);
            } else if let Some(a) = n.additional.filter(|_| !n.pattern_props) {
                if self.is_false(a) {
                    s.fail(&child, "additional property not allowed");
                } else {
                    self.check(a, val, &child, d, s);
                }
            }
            if let Some(pn) = n.property_names {
                let before = s.out.len();
                self.check(pn, &Value::String(k.clone()), &child, d, s);
                for e in s.out.get_mut(before..).unwrap_or_default() {
                    e.push_str(" (property name)");
                }
            }
        }
    }

    fn check_array(&self, n: &Node, a: &[Value], ptr: &str, d: Depth, s: &mut Sink) {
        s.bounds(ptr, a.len() as u64, n.item_count, ("item", "items"));
        for (idx, item) in a.iter().enumerate() {
            if s.full() {
                break;
            }
            let child = format!("{ptr}/{idx}");
            match n.prefix.get(idx).copied().or(n.items) {
                Some(sub) if idx >= n.prefix.len() && self.is_false(sub) => {
                    s.fail(&child, "additional item not allowed")
                }
                Some(sub) => self.check(sub, item, &child, d, s),
                None => {}
            }
        }
        if n.unique {
            let dup = (0..a.len()).find_map(|x| {
                let first = a.get(x)?;
                a.iter().enumerate().skip(x + 1).find(|(_, b)| json_eq(first, b)).map(|(y, _)| (x, y))
            });
            if let Some((x, y)) = dup {
                s.fail(ptr, format!("items must be unique, but items {x} and {y} are equal"));
            }
        }
        if let Some(c) = n.contains {
            let hits = a.iter().filter(|x| self.matches(c, x, ptr, d)).count() as u64;
            let bounds = (Some(n.contains_count.0.unwrap_or(1)), n.contains_count.1);
            s.bounds(ptr, hits, bounds, ("item matching \"contains\"", "items matching \"contains\""));
        }
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn percent_decode(s: &str) -> Option<String> {
    let (b, mut out, mut i) = (s.as_bytes(), Vec::with_capacity(s.len()), 0);
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hex = s.get(i + 1..i + 3).filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array()?.iter().map(|s| s.as_str().map(str::to_string)).collect()
}

fn uint(v: &Value) -> Option<u64> {
    let Value::Number(n) = v else { return None };
    n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19).map(|f| f as u64))
}

fn type_mask(v: &Value) -> Option<u8> {
    let one = |t: &Value| TYPES.iter().position(|n| Some(*n) == t.as_str()).map(|i| 1u8 << i);
    match v {
        Value::Array(a) if !a.is_empty() => a.iter().try_fold(0, |acc, t| Some(acc | one(t)?)),
        t => one(t),
    }
}

fn is_integer(n: &Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// The instance's type bit(s) (see `TYPES`; integers also set the "integer" bit) and its type name.
fn type_of(v: &Value) -> (u8, &'static str) {
    let k = match v {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Object(_) => 2,
        Value::Array(_) => 3,
        Value::Number(n) if is_integer(n) => return (16 | 64, "number"),
        Value::Number(_) => 4,
        Value::String(_) => 5,
    };
    (1 << k, TYPES.get(k).copied().unwrap_or_default())
}

fn int(n: &Number) -> Option<i128> {
    n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from))
}

/// Exact when both are integers, else by f64 value.
fn num_cmp(a: &Number, b: &Number) -> Ordering {
    match (int(a), int(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.as_f64().unwrap_or(0.0).partial_cmp(&b.as_f64().unwrap_or(0.0)).unwrap_or(Ordering::Equal),
    }
}

fn is_multiple(x: &Number, m: &Number) -> bool {
    if let (Some(a), Some(b)) = (int(x), int(m).filter(|b| *b != 0)) {
        return a % b == 0;
    }
    let q = x.as_f64().unwrap_or(0.0) / m.as_f64().unwrap_or(1.0);
    q.is_finite() && (q - q.round()).abs() < 1e-9
}

/// JSON equality where numbers compare by value (1 == 1.0).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => num_cmp(x, y) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, p)| y.get(k).is_some_and(|q| json_eq(p, q)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each case is (schema, instance, expected errors); no expected errors means the instance is valid.
    fn cases(list: &[(Value, Value, &[&str])]) {
        for (schema, inst, want) in list {
            let s = Schema::compile(schema).unwrap_or_else(|e| panic!("{schema} should compile: {e}"));
            assert_eq!(s.validate(inst).err().unwrap_or_default(), *want, "schema {schema}, instance {inst}");
            assert_eq!(s.is_valid(inst), want.is_empty(), "schema {schema}, instance {inst}");
        }
    }

    #[test]
    fn types_and_integers() {
        cases(&[
            (json!({"type": "string"}), json!("x"), &[]),
            (json!({"type": "string"}), json!(3), &["(root): expected string, got number"]),
            (json!({"type": ["string", "null"]}), json!(null), &[]),
            (json!({"type": ["string", "null"]}), json!(true), &["(root): expected null or string, got boolean"]),
            (json!({"type": "boolean"}), json!(false), &[]),
            (json!({"type": "object"}), json!([]), &["(root): expected object, got array"]),
            (json!({"type": "array"}), json!({}), &["(root): expected array, got object"]),
            (json!({"type": "null"}), json!(0), &["(root): expected null, got number"]),
            (json!({"type": "number"}), json!(1.5), &[]),
            (json!({"type": "integer"}), json!(1), &[]),
            (json!({"type": "integer"}), json!(1.0), &[]),
            (json!({"type": "integer"}), json!(u64::MAX), &[]),
            (json!({"type": "integer"}), json!(i64::MIN), &[]),
            (json!({"type": "integer"}), json!(1.5), &["(root): expected integer, got number"]),
            (
                json!({"properties": {"age": {"type": "integer"}}}),
                json!({"age": "x"}),
                &["/age: expected integer, got string"],
            ),
        ]);
    }

    #[test]
    fn enum_and_const() {
        cases(&[
            (json!({"enum": ["a", "b", 1]}), json!(1.0), &[]),
            (
                json!({"properties": {"x": {"enum": ["a", "b"]}}}),
                json!({"x": "c"}),
                &["/x: value must be one of [\"a\",\"b\"]"],
            ),
            (json!({"const": {"a": [1, 2]}}), json!({"a": [1.0, 2]}), &[]),
            (json!({"const": 5}), json!(6), &["(root): value must be equal to 5"]),
        ]);
    }

    #[test]
    fn object_keywords() {
        let closed =
            json!({"properties": {"a": {"type": "string"}}, "required": ["a", "b"], "additionalProperties": false});
        let typed = json!({"properties": {"a": {}}, "additionalProperties": {"type": "integer"}});
        let counts = json!({"minProperties": 1, "maxProperties": 2});
        cases(&[
            (
                closed.clone(),
                json!({"a": "x", "b": 2, "extra": 1}),
                &["/b: additional property not allowed", "/extra: additional property not allowed"],
            ),
            (closed, json!({"a": "x"}), &["(root): missing required property \"b\""]),
            (json!({"required": ["a"]}), json!({"a": 1}), &[]),
            (json!({"required": ["a"]}), json!(5), &[]), // object keywords ignore non-objects
            (typed.clone(), json!({"a": "s", "b": 2}), &[]),
            (typed, json!({"b": "s"}), &["/b: expected integer, got string"]),
            (counts.clone(), json!({"a": 1}), &[]),
            (counts.clone(), json!({}), &["(root): expected at least 1 property, got 0"]),
            (counts, json!({"a": 1, "b": 2, "c": 3}), &["(root): expected at most 2 properties, got 3"]),
            // patternProperties is unsupported, so additionalProperties is not enforced next to it.
            (json!({"patternProperties": {"^x": {}}, "additionalProperties": false}), json!({"xy": 1}), &[]),
            (json!({"propertyNames": {"maxLength": 3}}), json!({"abc": 1}), &[]),
            (
                json!({"propertyNames": {"maxLength": 3}}),
                json!({"abcd": 1}),
                &["/abcd: expected at most 3 characters, got 4 (property name)"],
            ),
        ]);
    }

    #[test]
    fn dependencies() {
        let req = json!({"dependentRequired": {"a": ["b"]}});
        let old = json!({"dependencies": {"a": ["b"], "c": {"required": ["d"]}}});
        cases(&[
            (req.clone(), json!({"a": 1, "b": 2}), &[]),
            (req.clone(), json!({"b": 2}), &[]),
            (req, json!({"a": 1}), &["(root): property \"a\" requires property \"b\""]),
            (old.clone(), json!({"c": 1, "d": 2}), &[]),
            (old.clone(), json!({"c": 1}), &["(root): missing required property \"d\""]),
            (old, json!({"a": 1}), &["(root): property \"a\" requires property \"b\""]),
            (
                json!({"dependentSchemas": {"a": {"maxProperties": 1}}}),
                json!({"a": 1, "b": 2}),
                &["(root): expected at most 1 property, got 2"],
            ),
        ]);
    }

    #[test]
    fn array_keywords() {
        let list = json!({"items": {"type": "integer"}, "minItems": 1, "maxItems": 3});
        let tuple = json!({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false});
        let draft7 = json!({"items": [{"type": "string"}], "additionalItems": {"type": "boolean"}});
        cases(&[
            (list.clone(), json!([1, 2]), &[]),
            (list.clone(), json!([1, "x"]), &["/1: expected integer, got string"]),
            (list.clone(), json!([]), &["(root): expected at least 1 item, got 0"]),
            (
                json!({"properties": {"tags": list}}),
                json!({"tags": [1, 2, 3, 4, 5]}),
                &["/tags: expected at most 3 items, got 5"],
            ),
            (tuple.clone(), json!(["a", 1]), &[]),
            (tuple.clone(), json!(["a"]), &[]),
            (tuple.clone(), json!([1, 1]), &["/0: expected string, got number"]),
            (tuple, json!(["a", 1, 2]), &["/2: additional item not allowed"]),
            (draft7.clone(), json!(["a", true, false]), &[]),
            (draft7, json!(["a", 1]), &["/1: expected boolean, got number"]),
        ]);
    }

    #[test]
    fn unique_items_and_contains() {
        let unique = json!({"uniqueItems": true});
        let contains = json!({"contains": {"type": "string"}});
        let counted = json!({"contains": {"type": "string"}, "minContains": 2, "maxContains": 3});
        cases(&[
            (unique.clone(), json!([1, 2, {"a": 1}, {"a": 2}]), &[]),
            (unique.clone(), json!([1, 2, 1.0]), &["(root): items must be unique, but items 0 and 2 are equal"]),
            (
                unique,
                json!([[1, {"x": null}], [1.0, {"x": null}]]),
                &["(root): items must be unique, but items 0 and 1 are equal"],
            ),
            (contains.clone(), json!([1, "a"]), &[]),
            (contains, json!([1, 2]), &["(root): expected at least 1 item matching \"contains\", got 0"]),
            (counted.clone(), json!(["a", "b", 1]), &[]),
            (counted.clone(), json!(["a", 1]), &["(root): expected at least 2 items matching \"contains\", got 1"]),
            (counted, json!(["a", "b", "c", "d"]), &["(root): expected at most 3 items matching \"contains\", got 4"]),
            (json!({"contains": {"type": "string"}, "minContains": 0}), json!([1]), &[]),
        ]);
    }

    #[test]
    fn numeric_keywords() {
        cases(&[
            (json!({"minimum": 1, "maximum": 14}), json!(14), &[]),
            (json!({"properties": {"n": {"minimum": 1}}}), json!({"n": 0}), &["/n: must be >= 1"]),
            (json!({"maximum": 1.5}), json!(2), &["(root): must be <= 1.5"]),
            (json!({"maximum": 1}), json!(1.0), &[]),
            (json!({"exclusiveMinimum": 0, "exclusiveMaximum": 10}), json!(0.5), &[]),
            (json!({"exclusiveMinimum": 0}), json!(0), &["(root): must be > 0"]),
            (json!({"exclusiveMaximum": 10}), json!(10.0), &["(root): must be < 10"]),
            (json!({"minimum": 5, "exclusiveMinimum": true}), json!(5), &["(root): must be > 5"]), // draft-04 form
            (json!({"multipleOf": 0.1}), json!(0.3), &[]),
            (json!({"multipleOf": 5}), json!(-15), &[]),
            (json!({"multipleOf": 2}), json!(7), &["(root): must be a multiple of 2"]),
            (json!({"multipleOf": 0.5}), json!(1.25), &["(root): must be a multiple of 0.5"]),
            // Integers compare exactly, even beyond f64 precision.
            (json!({"minimum": u64::MAX}), json!(u64::MAX - 1), &["(root): must be >= 18446744073709551615"]),
            (json!({"maximum": -1}), json!(i64::MIN), &[]),
            (json!({"multipleOf": 3}), json!(u64::MAX), &[]),
            (json!({"minimum": 3}), json!("a"), &[]), // numeric keywords ignore non-numbers
        ]);
    }

    #[test]
    fn string_keywords() {
        let s = json!({"minLength": 2, "maxLength": 3});
        cases(&[
            (s.clone(), json!("héé"), &[]),
            (s.clone(), json!("😀😀"), &[]),
            (s.clone(), json!("a"), &["(root): expected at least 2 characters, got 1"]),
            (s, json!("abcd"), &["(root): expected at most 3 characters, got 4"]),
            (json!({"pattern": "^a$", "format": "email"}), json!("zzz"), &[]), // accepted, not checked
        ]);
    }

    #[test]
    fn combinators() {
        let one = json!({"oneOf": [{"type": "integer"}, {"minimum": 2}]});
        cases(&[
            (json!({"allOf": [{"type": "integer"}, {"minimum": 3}]}), json!(3), &[]),
            (json!({"allOf": [{"type": "integer"}, {"minimum": 3}]}), json!(2), &["(root): must be >= 3"]),
            (json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}), json!(1), &[]),
            (
                json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
                json!(1.5),
                &["(root): does not match any of the allowed schemas (anyOf)"],
            ),
            (one.clone(), json!(1), &[]),
            (one.clone(), json!(2.5), &[]),
            (one.clone(), json!(3), &["(root): must match exactly one schema (oneOf), but matches 0 and 1"]),
            (one, json!(1.5), &["(root): does not match any of the allowed schemas (oneOf)"]),
            (json!({"not": {"type": "null"}}), json!(0), &[]),
            (json!({"not": {"type": "null"}}), json!(null), &["(root): must not match the schema in \"not\""]),
        ]);
    }

    #[test]
    fn if_then_else() {
        let s = json!({"if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["a"]}, "else": {"required": ["b"]}});
        cases(&[
            (s.clone(), json!({"kind": "a", "a": 1}), &[]),
            (s.clone(), json!({"kind": "z", "b": 1}), &[]),
            (s.clone(), json!({"kind": "a", "b": 1}), &["(root): missing required property \"a\""]),
            (s, json!({"kind": "z"}), &["(root): missing required property \"b\""]),
            (json!({"then": false}), json!(1), &[]), // then without if is ignored
        ]);
    }

    #[test]
    fn refs_and_recursion() {
        let tree = json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["name"]
        });
        let mut deep = json!({"name": "leaf"});
        for _ in 0..70 {
            deep = json!({"name": "n", "children": [deep]});
        }
        let mut nested = json!({"type": "string"});
        for _ in 0..300 {
            nested = json!({ "allOf": [nested] });
        }
        let defs = json!({"$defs": {"x": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/x"}}});
        let cyclic = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
        let escaped = json!({"properties": {"a/b": {"type": "integer"}, "c~d": {"$ref": "#/properties/a~1b"}}});
        cases(&[
            (defs.clone(), json!({"a": "s"}), &[]),
            (defs, json!({"a": 1}), &["/a: expected string, got number"]),
            (
                json!({"definitions": {"a b": {"minimum": 1}}, "items": {"$ref": "#/definitions/a%20b"}}),
                json!([0]),
                &["/0: must be >= 1"],
            ),
            (tree.clone(), json!({"name": "r", "children": [{"name": "a", "children": [{"name": "b"}]}]}), &[]),
            (
                tree.clone(),
                json!({"name": "r", "children": [{"name": "a", "children": [{"name": 5}]}]}),
                &["/children/0/children/0/name: expected string, got number"],
            ),
            (
                escaped,
                json!({"a/b": "x", "c~d": "y"}),
                &["/a~1b: expected integer, got string", "/c~0d: expected integer, got string"],
            ),
            (cyclic, json!(1), &["(root): schema recursion too deep"]),
            // Deep schemas compile without recursion; validation stops at 256 nested subschemas.
            (nested, json!(1), &["(root): schema recursion too deep"]),
        ]);
        let e = Schema::compile(&tree).unwrap().validate(&deep).unwrap_err();
        assert!(e.len() == 1 && e[0].ends_with("/children/0: schema recursion too deep"), "{e:?}");
    }

    #[test]
    fn boolean_schemas() {
        cases(&[
            (json!(true), json!({"anything": [1]}), &[]),
            (json!(false), json!(1), &["(root): no value is allowed here"]),
            (json!({"properties": {"a": false}}), json!({"a": 1}), &["/a: no value is allowed here"]),
            (json!({"properties": {"a": false}}), json!({"b": 1}), &[]),
        ]);
    }

    #[test]
    fn malformed_schemas_are_rejected() {
        for bad in [
            json!(5),
            json!({"type": 5}),
            json!({"type": "str"}),
            json!({"type": []}),
            json!({"required": "x"}),
            json!({"required": [1]}),
            json!({"properties": []}),
            json!({"properties": {"a": 3}}),
            json!({"minimum": "a"}),
            json!({"minLength": -1}),
            json!({"maxItems": 1.5}),
            json!({"multipleOf": 0}),
            json!({"anyOf": []}),
            json!({"allOf": {}}),
            json!({"enum": "a"}),
            json!({"uniqueItems": "yes"}),
            json!({"$ref": 1}),
            json!({"$ref": "other.json#/a"}),
            json!({"$ref": "#/$defs/missing"}),
            json!({"$ref": "#anchor"}),
            json!({"$ref": "#/%zz"}),
            json!({"$defs": {"x": {"type": "nope"}}}),
            json!({"dependentRequired": {"a": "b"}}),
        ] {
            assert!(Schema::compile(&bad).is_err(), "{bad} should be rejected");
        }
        let e = Schema::compile(&json!({"properties": {"a": {"type": 5}}})).unwrap_err();
        assert!(e.starts_with("#/properties/a: \"type\" must be"), "{e}");
        let e = Schema::compile(&json!({"items": {"$ref": "#/nope"}})).unwrap_err();
        assert_eq!(e, "#/items: $ref \"#/nope\" points nowhere");
        // Annotations and unknown keywords are accepted.
        let fine = json!({"title": 1, "description": "d", "default": 3, "examples": [], "$schema": "x", "$id": "y",
            "$comment": "c", "deprecated": true, "readOnly": true, "writeOnly": false, "x-custom": {"type": 5}});
        assert!(Schema::compile(&fine).is_ok());
    }

    #[test]
    fn error_cap() {
        let props: Map<String, Value> = (0..20).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let e = Schema::compile(&json!({"additionalProperties": {"type": "string"}})).unwrap();
        let e = e.validate(&Value::Object(props)).unwrap_err();
        assert_eq!((e.len(), e[0].as_str()), (10, "/k00: expected string, got number"));
        let s = Schema::compile(&json!({"items": {"type": "string"}})).unwrap();
        assert_eq!(s.validate(&json!(vec![0; 50])).unwrap_err().len(), 10);
    }

    #[test]
    fn typical_tool_schema() {
        let s = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "days": {"type": "integer", "minimum": 1, "maximum": 14}
            },
            "required": ["city"],
            "additionalProperties": false
        });
        cases(&[
            (s.clone(), json!({"city": "Paris"}), &[]),
            (s.clone(), json!({"city": "Paris", "days": 3}), &[]),
            (s.clone(), json!({"city": "Paris", "days": 3.0}), &[]),
            (
                s.clone(),
                json!({"city": "", "days": 15, "units": "metric"}),
                &[
                    "/city: expected at least 1 character, got 0",
                    "/days: must be <= 14",
                    "/units: additional property not allowed",
                ],
            ),
            (
                s.clone(),
                json!({"days": "3"}),
                &["(root): missing required property \"city\"", "/days: expected integer, got string"],
            ),
            (s, json!("Paris"), &["(root): expected object, got string"]),
        ]);
    }
}
