//! Cost: what a run's model calls cost in US dollars, from a price table per model id.
//!
//! **Integers, not floats.** A price is kept in micro-dollars per million tokens (which is pico-dollars per
//! token), so a turn's cost is an exact integer sum of its tokens times their prices, in pico-dollars, rounded once
//! (half up) to the nano-dollar. A run's cost and a conversation's are sums of their turns' nano-dollars: adding
//! turns in any order, or a sub-agent's spend, gives the same total, and nothing drifts. The JSON number
//! `costUsd` is that count divided by 10^9; it reads back as the same count for any total below $2,000,000
//! (where every nano-dollar count is a distinct `f64`).
//!
//! **Never guessed.** A turn of a model the table has no price for has no cost, and a total with such a turn in
//! it has none either (`costUsd` is left out), rather than a number that looks right. The built-in defaults
//! ([`DEFAULT_PRICES`]) are the providers' published standard list prices for the models they name; a
//! configuration's `prices` adds models and overrides them. A model id matches exactly (a dated snapshot such as
//! `gpt-4o-mini-2024-07-18` needs its own entry); an id `<provider>:<model>`, as the npm package names an AI SDK
//! model, is also looked up as `<model>`.
//!
//! Token kinds: `cachedInputTokens` (read from the provider's prompt cache) and `cacheWriteTokens` (written to it,
//! Anthropic) are part of `inputTokens`; `reasoningTokens` are part of `outputTokens`. Each is priced by its own
//! entry when the price has one (`cachedInput`, `cacheWrite`, `reasoning`), otherwise at the input or output price.

use super::transcript::Usage;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

/// Nano-dollars in a dollar.
pub const NANOS_PER_USD: u64 = 1_000_000_000;

/// One model's prices, in US dollars per million tokens (kept as whole micro-dollars per million tokens: six
/// decimals; more are rounded).
// Read by hand (see `PriceTable`'s reader), as the derive would with `deny_unknown_fields`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct Price {
    /// Prompt tokens.
    #[serde(serialize_with = "per_million")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub input: u64,
    /// Completion tokens.
    #[serde(serialize_with = "per_million")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub output: u64,
    /// Prompt tokens read from the provider's cache (default: the input price).
    #[serde(serialize_with = "per_million_opt", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub cached_input: Option<u64>,
    /// Prompt tokens written to the provider's cache (default: the input price).
    #[serde(serialize_with = "per_million_opt", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub cache_write: Option<u64>,
    /// Reasoning tokens (default: the output price).
    #[serde(serialize_with = "per_million_opt", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "number", optional))]
    pub reasoning: Option<u64>,
}

impl Price {
    /// A price of `input` and `output` micro-dollars per million tokens, the other kinds at those.
    pub const fn new(input: u64, output: u64) -> Price {
        Price { input, output, cached_input: None, cache_write: None, reasoning: None }
    }

    /// What `u`'s tokens cost, in nano-dollars (exact pico-dollars, rounded half up once).
    pub fn cost_nanos(&self, u: &Usage) -> u64 {
        let cached = u.cached_input_tokens.min(u.input_tokens);
        let written = u.cache_write_tokens.min(u.input_tokens - cached);
        let plain_in = u.input_tokens - cached - written;
        let reasoning = u.reasoning_tokens.min(u.output_tokens);
        let plain_out = u.output_tokens - reasoning;
        // Pico-dollars per token split into whole nano-dollars and the rest (under 1,000): the products stay in
        // 64 bits (saturating only past 10^16 tokens), and the rest's pico-dollars are rounded once.
        let (mut nanos, mut picos) = (0u64, 0u64);
        for (tokens, price) in [
            (plain_in, self.input),
            (cached, self.cached_input.unwrap_or(self.input)),
            (written, self.cache_write.unwrap_or(self.input)),
            (plain_out, self.output),
            (reasoning, self.reasoning.unwrap_or(self.output)),
        ] {
            nanos = nanos.saturating_add(tokens.saturating_mul(price / 1000));
            picos = picos.saturating_add(tokens.saturating_mul(price % 1000));
        }
        nanos.saturating_add(picos.saturating_add(500) / 1000)
    }
}

/// Prices per model id: the configured ones (a JSON object of model ids; a list here, a few entries), then the
/// built-in defaults ([`DEFAULT_PRICES`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceTable(pub Vec<(String, Price)>);

impl PriceTable {
    /// `model` priced `price` (replacing its price if it has one).
    pub fn insert(&mut self, model: impl Into<String>, price: Price) {
        let model = model.into();
        self.0.retain(|(id, _)| *id != model);
        self.0.push((model, price));
    }

    /// The price of `model`: its configured one, else its default, else `None` (its turns have no cost). An id
    /// `<provider>:<model>` (the npm package's AI SDK models) is looked up whole first, then as `<model>`.
    pub fn get(&self, model: &str) -> Option<Price> {
        let exact = |id: &str| self.0.iter().find(|(m, _)| m == id).map(|(_, p)| *p).or_else(|| default_price(id));
        exact(model).or_else(|| model.split_once(':').and_then(|(_, name)| exact(name)))
    }

    /// What a turn of `model` using `u` cost, in nano-dollars; `None` when the model has no price.
    pub fn cost_nanos(&self, model: &str, u: &Usage) -> Option<u64> {
        self.get(model).map(|p| p.cost_nanos(u))
    }
}

/// Micro-dollars per million tokens from dollars per million tokens.
const fn usd(dollars: u64, micros: u64) -> u64 {
    dollars * 1_000_000 + micros
}

/// The built-in prices: standard-tier list prices the providers publish for the models they name (USD per
/// million tokens: input, output, cached input, cache write), and 0 for the offline mock model. Check them
/// against the provider's pricing page; a configuration's `prices` overrides any of them.
pub const DEFAULT_PRICES: &[(&str, [u64; 4])] = &[
    ("mock", [0, 0, 0, 0]),
    ("gpt-4o", [usd(2, 500_000), usd(10, 0), usd(1, 250_000), usd(2, 500_000)]),
    ("gpt-4o-mini", [usd(0, 150_000), usd(0, 600_000), usd(0, 75_000), usd(0, 150_000)]),
    ("gpt-4.1", [usd(2, 0), usd(8, 0), usd(0, 500_000), usd(2, 0)]),
    ("gpt-4.1-mini", [usd(0, 400_000), usd(1, 600_000), usd(0, 100_000), usd(0, 400_000)]),
    ("gpt-4.1-nano", [usd(0, 100_000), usd(0, 400_000), usd(0, 25_000), usd(0, 100_000)]),
    ("o4-mini", [usd(1, 100_000), usd(4, 400_000), usd(0, 275_000), usd(1, 100_000)]),
    ("gpt-5", [usd(1, 250_000), usd(10, 0), usd(0, 125_000), usd(1, 250_000)]),
    ("gpt-5-mini", [usd(0, 250_000), usd(2, 0), usd(0, 25_000), usd(0, 250_000)]),
    ("gpt-5-nano", [usd(0, 50_000), usd(0, 400_000), usd(0, 5_000), usd(0, 50_000)]),
    ("claude-opus-4-1", [usd(15, 0), usd(75, 0), usd(1, 500_000), usd(18, 750_000)]),
    ("claude-sonnet-4-5", [usd(3, 0), usd(15, 0), usd(0, 300_000), usd(3, 750_000)]),
    ("claude-sonnet-4-0", [usd(3, 0), usd(15, 0), usd(0, 300_000), usd(3, 750_000)]),
    ("claude-haiku-4-5", [usd(1, 0), usd(5, 0), usd(0, 100_000), usd(1, 250_000)]),
    ("claude-3-5-haiku-latest", [usd(0, 800_000), usd(4, 0), usd(0, 80_000), usd(1, 0)]),
    ("@cf/meta/llama-3.3-70b-instruct-fp8-fast", [usd(0, 293_000), usd(2, 253_000), usd(0, 293_000), usd(0, 293_000)]),
];

fn default_price(model: &str) -> Option<Price> {
    DEFAULT_PRICES.iter().find(|(id, _)| *id == model).map(|(_, [input, output, cached, write])| Price {
        input: *input,
        output: *output,
        cached_input: Some(*cached),
        cache_write: Some(*write),
        reasoning: None,
    })
}

/// A dollar amount as micro-dollars (rounded), from a JSON number; `None` unless finite, at least 0 and at most
/// `max` dollars.
fn micros_of(v: f64, max: f64) -> Option<u64> {
    (v.is_finite() && (0.0..=max).contains(&v)).then(|| (v * 1e6).round() as u64)
}

/// A price on the wire: dollars per million tokens (a JSON number), kept as micro-dollars.
fn per_million<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(*v as f64 / 1e6)
}

fn per_million_opt<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => per_million(v, s),
        None => s.serialize_none(),
    }
}

impl Serialize for PriceTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(id, p)| (id, p)))
    }
}

/// Read as a JSON value, then by hand (one reader instead of serde's map and struct machinery per deserializer,
/// for the Worker's size budget): an object of model ids, each `{input, output, cachedInput?, cacheWrite?,
/// reasoning?}` in dollars per million tokens (0 to 1,000,000); anything else is refused naming the model and the
/// field.
impl<'de> Deserialize<'de> for PriceTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PriceTable, D::Error> {
        PriceTable::from_value(Value::deserialize(d)?).map_err(de::Error::custom)
    }
}

impl PriceTable {
    fn from_value(v: Value) -> Result<PriceTable, String> {
        let Value::Object(models) = v else { return Err("prices must be an object of model ids".into()) };
        let mut table = PriceTable::default();
        for (id, fields) in models {
            let price = Price::from_object(fields).map_err(|e| format!("prices of {id:?}: {e}"))?;
            table.insert(id, price);
        }
        Ok(table)
    }
}

impl Price {
    fn from_object(v: Value) -> Result<Price, String> {
        const FIELDS: [&str; 5] = ["input", "output", "cachedInput", "cacheWrite", "reasoning"];
        let Value::Object(fields) = v else {
            return Err("an object {input, output, cachedInput?, cacheWrite?, reasoning?} was expected".into());
        };
        let mut got: [Option<u64>; 5] = [None; 5];
        for (name, value) in Map::into_iter(fields) {
            let Some(i) = FIELDS.iter().position(|f| *f == name) else {
                return Err(format!("unknown field `{name}`, expected one of {}", FIELDS.join(", ")));
            };
            got[i] = Some(value.as_f64().and_then(|v| micros_of(v, 1e6)).ok_or_else(|| {
                format!("`{name}` must be a number of dollars per million tokens, from 0 to 1000000")
            })?);
        }
        let [Some(input), Some(output), cached_input, cache_write, reasoning] = got else {
            return Err("`input` and `output` are required".into());
        };
        Ok(Price { input, output, cached_input, cache_write, reasoning })
    }
}

/// A nano-dollar amount on the wire as `costUsd`: a JSON number of dollars (left out when unknown).
pub(crate) mod usd_nanos {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(n) => s.serialize_f64(*n as f64 / NANOS_PER_USD as f64),
            None => s.serialize_none(),
        }
    }

    /// Any finite amount from 0 reads (one past `u64::MAX` nano-dollars saturates): what was written always reads
    /// back, a cost a provider's absurd token count saturated included.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            Some(v) if v.is_finite() && v >= 0.0 => Ok(Some((v * NANOS_PER_USD as f64).round() as u64)),
            Some(_) => Err(de::Error::custom("a cost in dollars from 0 was expected")),
            None => Ok(None),
        }
    }
}

/// A limit in dollars (`maxCostUsd`), kept as nano-dollars: a JSON number, 6 decimals at most counted.
pub(crate) mod usd_limit {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        usd_nanos::serialize(v, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(v) => micros_of(v, 1e9)
                .map(|m| Some(m * 1000))
                .ok_or_else(|| de::Error::custom("a limit in dollars from 0 to 1000000000 was expected")),
        }
    }
}

/// What a run's store operations were, and cost (`usage.storage`): counted by the store backends as they make
/// them, per run ([`crate::store::meter`]), priced by [`StoragePrices`] when recorded, and kept on the run's
/// checkpoint with each journal entry.
///
/// Workers KV bills each read (a bulk read per key, a miss too), write, delete and list; a Durable Object bills
/// each request (a call to it) and each SQLite row written. Bytes written are reported, not priced (KV bills
/// operations, not bytes; stored bytes are billed per GB-month, which a run's figure cannot say).
// Read by hand (see its `Deserialize`): serde's derive for it cost the npm wasm its size budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct StorageUsage {
    /// KV reads (keys read: a bulk read counts each key, as it is billed).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub reads: u64,
    /// KV writes.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub writes: u64,
    /// KV deletes.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub deletes: u64,
    /// KV lists.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub lists: u64,
    /// Durable Object requests (strict mode's calls to a run's object).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub requests: u64,
    /// SQLite rows a Durable Object wrote for those requests.
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub rows_written: u64,
    /// Bytes of values written (KV values and journal entries).
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub bytes_written: u64,
    /// What these operations cost in US dollars (`costUsd`; whole nano-dollars), at the prices in force when
    /// each was recorded.
    #[serde(rename = "costUsd", serialize_with = "usd_nanos_known")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub cost: u64,
}

/// Read as a JSON value, then by hand (one reader instead of serde's struct machinery per deserializer): an
/// object of the counts (each a whole number from 0; a missing one is 0; other fields are ignored) and `costUsd`
/// in dollars (from 0).
impl<'de> Deserialize<'de> for StorageUsage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StorageUsage, D::Error> {
        const COUNTS: [&str; 7] = ["reads", "writes", "deletes", "lists", "bytesWritten", "requests", "rowsWritten"];
        let Value::Object(fields) = Value::deserialize(d)? else {
            return Err(de::Error::custom("a storage usage must be an object"));
        };
        let mut w = [0u64; 8];
        for (name, value) in Map::into_iter(fields) {
            if name == "costUsd" {
                w[0] = usd_nanos::deserialize(value).map_err(de::Error::custom)?.unwrap_or_default();
            } else if let Some(i) = COUNTS.iter().position(|c| *c == name) {
                w[i + 1] = value
                    .as_u64()
                    .ok_or_else(|| de::Error::custom(format!("storage `{name}` must be a whole number from 0")))?;
            }
        }
        Ok(StorageUsage::from_wire(w))
    }
}

fn usd_nanos_known<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    usd_nanos::serialize(&Some(*v), s)
}

impl StorageUsage {
    /// The counts in wire order (see [`StorageUsage::from_wire`]).
    pub fn wire(&self) -> [u64; 8] {
        [
            self.cost,
            self.reads,
            self.writes,
            self.deletes,
            self.lists,
            self.bytes_written,
            self.requests,
            self.rows_written,
        ]
    }

    /// From the counts in wire order: `[costNanos, reads, writes, deletes, lists, bytesWritten, requests,
    /// rowsWritten]` (missing ones 0).
    pub fn from_wire(w: [u64; 8]) -> StorageUsage {
        let [cost, reads, writes, deletes, lists, bytes_written, requests, rows_written] = w;
        StorageUsage { reads, writes, deletes, lists, requests, rows_written, bytes_written, cost }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == StorageUsage::default()
    }

    /// Adds `other` (saturating).
    pub fn add(&mut self, other: StorageUsage) {
        let (a, b) = (self.wire(), other.wire());
        *self = StorageUsage::from_wire(std::array::from_fn(|i| a[i].saturating_add(b[i])));
    }

    /// `self` with its cost set from `prices` (exact pico-dollars per operation, rounded half up once).
    pub fn priced(mut self, prices: &StoragePrices) -> StorageUsage {
        let (mut nanos, mut picos) = (0u64, 0u64);
        for (ops, price) in [
            (self.reads, prices.read),
            (self.writes, prices.write),
            (self.deletes, prices.delete),
            (self.lists, prices.list),
            (self.requests, prices.request),
            (self.rows_written, prices.row_written),
        ] {
            nanos = nanos.saturating_add(ops.saturating_mul(price / 1000));
            picos = picos.saturating_add(ops.saturating_mul(price % 1000));
        }
        self.cost = nanos.saturating_add(picos.saturating_add(500) / 1000);
        self
    }
}

/// Prices of store operations, in US dollars per million operations (kept as whole micro-dollars per million:
/// pico-dollars per operation). The defaults are Cloudflare's published Workers Paid prices beyond the included
/// amounts: KV reads $0.50, writes, deletes and lists $5.00; Durable Object requests $0.15 and SQLite rows
/// written $1.00 (rows read, $0.001, are not counted). Configured as `storagePrices` (any subset; an unknown
/// field is refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct StoragePrices {
    /// A KV read (per key).
    #[serde(serialize_with = "per_million")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub read: u64,
    /// A KV write.
    #[serde(serialize_with = "per_million")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub write: u64,
    /// A KV delete.
    #[serde(serialize_with = "per_million")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub delete: u64,
    /// A KV list.
    #[serde(serialize_with = "per_million")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub list: u64,
    /// A Durable Object request.
    #[serde(serialize_with = "per_million")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub request: u64,
    /// A SQLite row a Durable Object wrote.
    #[serde(serialize_with = "per_million")]
    #[cfg_attr(feature = "ts", ts(type = "number"))]
    pub row_written: u64,
}

impl Default for StoragePrices {
    fn default() -> Self {
        StoragePrices {
            read: usd(0, 500_000),
            write: usd(5, 0),
            delete: usd(5, 0),
            list: usd(5, 0),
            request: usd(0, 150_000),
            row_written: usd(1, 0),
        }
    }
}

/// Read as a JSON value, then by hand (as [`PriceTable`]): an object with any of `read`, `write`, `delete`,
/// `list`, `request`, `rowWritten` in dollars per million operations (0 to 1,000,000); the others keep their
/// defaults.
impl<'de> Deserialize<'de> for StoragePrices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StoragePrices, D::Error> {
        const FIELDS: [&str; 6] = ["read", "write", "delete", "list", "request", "rowWritten"];
        let Value::Object(fields) = Value::deserialize(d)? else {
            return Err(de::Error::custom(
                "storagePrices must be an object {read?, write?, delete?, list?, request?, rowWritten?}",
            ));
        };
        let mut p = StoragePrices::default();
        for (name, value) in Map::into_iter(fields) {
            let slot = match FIELDS.iter().position(|f| *f == name) {
                Some(0) => &mut p.read,
                Some(1) => &mut p.write,
                Some(2) => &mut p.delete,
                Some(3) => &mut p.list,
                Some(4) => &mut p.request,
                Some(_) => &mut p.row_written,
                None => {
                    return Err(de::Error::custom(format!(
                        "storagePrices: unknown field `{name}`, expected one of {}",
                        FIELDS.join(", ")
                    )))
                }
            };
            *slot = value.as_f64().and_then(|v| micros_of(v, 1e6)).ok_or_else(|| {
                de::Error::custom(format!(
                    "storagePrices: `{name}` must be a number of dollars per million operations, from 0 to 1000000"
                ))
            })?;
        }
        Ok(p)
    }
}

/// A checkpoint's storage usage on the wire (the header's `so`): `[costNanos, reads, writes, deletes, lists,
/// bytesWritten, requests, rowsWritten]`, trailing zeros left out.
pub(crate) mod storage_wire {
    use super::StorageUsage;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<StorageUsage>, s: S) -> Result<S::Ok, S::Error> {
        let Some(u) = v else { return s.serialize_none() };
        let w = u.wire();
        let n = w.iter().rposition(|x| *x != 0).map_or(0, |i| i + 1);
        s.collect_seq(&w[..n])
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StorageUsage>, D::Error> {
        let v = Vec::<u64>::deserialize(d)?;
        if v.len() > 8 {
            return Err(serde::de::Error::custom("a storage usage has at most 8 counts"));
        }
        let mut w = [0u64; 8];
        w[..v.len()].copy_from_slice(&v);
        Ok(Some(StorageUsage::from_wire(w)))
    }
}

/// Nano-dollars as a dollar amount for people: `$0.001234`, `$12.5`, `$0` (at most nine decimals, no trailing
/// zeros).
pub fn usd_text(nanos: u64) -> String {
    let (whole, frac) = (nanos / NANOS_PER_USD, nanos % NANOS_PER_USD);
    if frac == 0 {
        return format!("${whole}");
    }
    let digits = format!("{frac:09}");
    format!("${whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn usage(input: u64, output: u64, cached: u64, written: u64, reasoning: u64) -> Usage {
        Usage {
            cached_input_tokens: cached,
            cache_write_tokens: written,
            reasoning_tokens: reasoning,
            ..Usage::tokens(input, output)
        }
    }

    #[test]
    fn a_turn_costs_its_tokens_times_their_prices() {
        // gpt-4o-mini: $0.15 in, $0.60 out, $0.075 cached per million tokens.
        let t = PriceTable::default();
        assert_eq!(t.cost_nanos("gpt-4o-mini", &Usage::tokens(1_000_000, 1_000_000)), Some(750_000_000));
        assert_eq!(t.cost_nanos("gpt-4o-mini", &Usage::tokens(1, 1)), Some(750), "150 + 600 nano-dollars");
        // A token at $0.000001 per million is a pico-dollar: 499 round down to 0 nano-dollars, 500 up to 1.
        let pico = Price::new(1, 1);
        assert_eq!((pico.cost_nanos(&Usage::tokens(499, 0)), pico.cost_nanos(&Usage::tokens(250, 250))), (0, 1));
        // 1,000 cached of 3,000 input: 2,000 × 0.15 + 1,000 × 0.075 = 375 micro-dollars.
        assert_eq!(t.cost_nanos("gpt-4o-mini", &usage(3_000, 0, 1_000, 0, 0)), Some(375_000));
        // Claude: cache writes at $3.75, reads at $0.30; reasoning at the output price.
        let u = usage(10_000, 2_000, 4_000, 1_000, 500);
        assert_eq!(
            t.cost_nanos("claude-sonnet-4-5", &u),
            Some(5_000 * 3_000 + 4_000 * 300 + 1_000 * 3_750 + 2_000 * 15_000)
        );
        // Counts of a kind beyond their total are clipped to it (a provider's inconsistent report).
        assert_eq!(
            t.cost_nanos("gpt-4o-mini", &usage(10, 0, 50, 50, 0)),
            t.cost_nanos("gpt-4o-mini", &usage(10, 0, 10, 0, 0))
        );
        assert_eq!(t.cost_nanos("mock", &Usage::tokens(5, 5)), Some(0));
        assert_eq!(t.cost_nanos("gpt-4o-mini-2024-07-18", &Usage::tokens(5, 5)), None, "exact ids only");
        // An AI SDK model's id: `<provider>:<model>`.
        assert_eq!(t.cost_nanos("openai.chat:gpt-4o-mini", &Usage::tokens(1, 1)), Some(750));
        assert_eq!(t.cost_nanos("bedrock:anthropic.claude-v2:1", &Usage::tokens(1, 1)), None);
    }

    #[test]
    fn configured_prices_override_and_extend_the_defaults() {
        let t: PriceTable = serde_json::from_str(
            r#"{"gpt-4o-mini": {"input": 1, "output": 2}, "my-model": {"input": 0.5, "output": 1.25, "reasoning": 3}}"#,
        )
        .unwrap();
        assert_eq!(t.cost_nanos("gpt-4o-mini", &Usage::tokens(1_000_000, 0)), Some(NANOS_PER_USD));
        assert_eq!(t.cost_nanos("my-model", &usage(0, 2_000_000, 0, 0, 1_000_000)), Some(4_250_000_000));
        assert_eq!(t.cost_nanos("claude-haiku-4-5", &Usage::tokens(1_000_000, 0)), Some(NANOS_PER_USD));
        for bad in [
            r#"{"m": {"input": -1, "output": 1}}"#,
            r#"{"m": {"input": 1}}"#,
            r#"{"m": {"input": 1, "output": 1, "cached": 1}}"#,
            r#"{"m": {"input": "1", "output": 1}}"#,
            r#"{"m": {"input": 1e300, "output": 1}}"#,
        ] {
            assert!(serde_json::from_str::<PriceTable>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dollars_print_with_their_nano_dollars_and_no_trailing_zeros() {
        assert_eq!(usd_text(0), "$0");
        assert_eq!(usd_text(1), "$0.000000001");
        assert_eq!(usd_text(1_234_000), "$0.001234");
        assert_eq!(usd_text(12_500_000_000), "$12.5");
    }

    proptest! {
        /// A run's cost is the sum of its turns' costs whatever their order, each turn's exact to half a
        /// nano-dollar of the real-number product, and costUsd reads back as the same nano-dollars.
        #[test]
        fn costs_are_exact_integer_sums(
            turns in proptest::collection::vec((0u64..5_000_000, 0u64..500_000, 0u64..5_000_000, 0u64..500_000), 1..20),
            price in (0u64..100_000_000, 0u64..100_000_000, 0u64..100_000_000),
        ) {
            let p = Price { input: price.0, output: price.1, cached_input: Some(price.2), cache_write: None, reasoning: None };
            let mut total = Usage::default();
            let mut reversed = Usage::default();
            let mut sum = 0u64;
            for &(i, o, c, _) in &turns {
                let mut u = usage(i, o, c.min(i), 0, 0);
                let exact = u128::from(i - c.min(i)) * u128::from(price.0) + u128::from(c.min(i)) * u128::from(price.2)
                    + u128::from(o) * u128::from(price.1);
                let nanos = p.cost_nanos(&u);
                prop_assert!(u128::from(nanos) * 1000 + 500 >= exact && u128::from(nanos) * 1000 <= exact + 500);
                u.cost = Some(nanos);
                sum += nanos;
                total.add(u);
            }
            for &(i, o, c, _) in turns.iter().rev() {
                let mut u = usage(i, o, c.min(i), 0, 0);
                u.cost = Some(p.cost_nanos(&u));
                reversed.add(u);
            }
            prop_assert_eq!(total.cost, Some(sum));
            prop_assert_eq!(total, reversed);
            let text = serde_json::to_string(&total).unwrap();
            prop_assert_eq!(serde_json::from_str::<Usage>(&text).unwrap(), total);
        }

        /// Any nano-dollar count below $2,000,000 survives JSON as costUsd; any other reads back (saturated at the
        /// largest).
        #[test]
        fn every_cost_written_reads_back(nanos in any::<u64>()) {
            let u = Usage { cost: Some(nanos), ..Usage::default() };
            let back: Usage = serde_json::from_str(&serde_json::to_string(&u).unwrap()).unwrap();
            let rel = (back.cost.unwrap() as f64 - nanos as f64).abs() / (nanos as f64).max(1.0);
            prop_assert!(rel < 1e-15, "{} read as {:?}", nanos, back.cost);
        }

        /// Any nano-dollar count below $2,000,000 survives JSON as costUsd.
        #[test]
        fn cost_usd_reads_back_exactly(nanos in 0u64..2_000_000 * NANOS_PER_USD) {
            let u = Usage { cost: Some(nanos), ..Usage::default() };
            let back: Usage = serde_json::from_str(&serde_json::to_string(&u).unwrap()).unwrap();
            prop_assert_eq!(back.cost, Some(nanos));
        }

        /// One unknown price makes the total unknown, in any position.
        #[test]
        fn an_unknown_turn_leaves_the_total_unknown(costs in proptest::collection::vec(proptest::option::of(0u64..1_000_000), 1..10)) {
            let mut total = Usage::default();
            for c in &costs {
                total.add(Usage { cost: *c, ..Usage::tokens(1, 1) });
            }
            let all_known = costs.iter().all(Option::is_some);
            prop_assert_eq!(total.cost.is_some(), all_known);
        }
    }

    /// Storage operations at the default prices: KV reads $0.50, writes, deletes and lists $5 per million; object
    /// requests $0.15 and rows written $1.
    #[test]
    fn storage_operations_cost_their_published_prices() {
        let u = StorageUsage {
            reads: 2_000_000,
            writes: 1_000_000,
            lists: 1,
            requests: 10,
            rows_written: 3,
            ..StorageUsage::default()
        };
        let p = StoragePrices::default();
        assert_eq!(u.priced(&p).cost, 1_000_000_000 + 5_000_000_000 + 5_000 + 1_500 + 3_000);
        // A price under a nano-dollar per operation: 0.0005 $/M = 0.5 pico-dollars … rounded once, half up.
        let tiny = StoragePrices { read: 1, ..StoragePrices::default() };
        let reads = |n| StorageUsage { reads: n, ..StorageUsage::default() }.priced(&tiny).cost;
        assert_eq!((reads(499), reads(500), reads(1_500)), (0, 1, 2));
    }

    /// The header's wire form keeps every count (trailing zeros left out) and reads back the same; more than
    /// eight counts are refused.
    #[test]
    fn the_storage_wire_form_round_trips() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct W(#[serde(with = "storage_wire")] Option<StorageUsage>);
        let kv = StorageUsage { reads: 3, writes: 2, bytes_written: 900, cost: 11_500, ..StorageUsage::default() };
        assert_eq!(serde_json::to_string(&W(Some(kv))).unwrap(), "[11500,3,2,0,0,900]");
        assert_eq!(serde_json::from_str::<W>("[11500,3,2,0,0,900]").unwrap(), W(Some(kv)));
        assert_eq!(serde_json::from_str::<W>("[]").unwrap(), W(Some(StorageUsage::default())));
        assert!(serde_json::from_str::<W>("[1,2,3,4,5,6,7,8,9]").is_err());
        assert!(serde_json::from_str::<W>("[-1]").is_err());
        // The object form (a snapshot's, a view's) reads back too, its cost in dollars.
        let v = serde_json::to_value(kv).unwrap();
        assert_eq!(v["costUsd"], serde_json::json!(0.0000115));
        assert_eq!(serde_json::from_value::<StorageUsage>(v).unwrap(), kv);
        // Counts are whole numbers from 0, the cost dollars from 0; a missing count is 0.
        for bad in [r#"{"reads": -1}"#, r#"{"writes": 1.5}"#, r#"{"costUsd": -1}"#, "[1]", r#"{"lists": "2"}"#] {
            assert!(serde_json::from_str::<StorageUsage>(bad).is_err(), "{bad}");
        }
        let some: StorageUsage = serde_json::from_str(r#"{"writes": 3, "other": true}"#).unwrap();
        assert_eq!(some, StorageUsage { writes: 3, ..StorageUsage::default() });
    }

    /// `storagePrices` takes any subset, in dollars per million operations; anything else is refused by name.
    #[test]
    fn storage_prices_read_any_subset_and_refuse_the_rest() {
        let p: StoragePrices = serde_json::from_str(r#"{"write": 4, "rowWritten": 0.5}"#).unwrap();
        assert_eq!(p, StoragePrices { write: 4_000_000, row_written: 500_000, ..StoragePrices::default() });
        for bad in [r#"{"writes": 4}"#, r#"{"read": -1}"#, r#"{"read": "1"}"#, "[]", r#"{"list": 2000000}"#] {
            let e = serde_json::from_str::<StoragePrices>(bad).unwrap_err().to_string();
            assert!(e.contains("storagePrices"), "{bad}: {e}");
        }
    }

    proptest! {
        /// Pricing the operations commit by commit gives what pricing them all at once gives when each price is
        /// a whole number of nano-dollars per operation (the defaults are): no drift over a run's entries.
        #[test]
        fn storage_cost_priced_in_parts_equals_the_whole(parts in proptest::collection::vec(proptest::array::uniform6(0u64..1_000), 1..40), nanos in proptest::array::uniform6(0u64..10_000)) {
            let p = StoragePrices { read: nanos[0] * 1000, write: nanos[1] * 1000, delete: nanos[2] * 1000, list: nanos[3] * 1000, request: nanos[4] * 1000, row_written: nanos[5] * 1000 };
            let mut total = StorageUsage::default();
            let mut whole = StorageUsage::default();
            for c in &parts {
                let u = StorageUsage { reads: c[0], writes: c[1], deletes: c[2], lists: c[3], requests: c[4], rows_written: c[5], bytes_written: 7, cost: 0 };
                total.add(u.priced(&p));
                whole.add(u);
            }
            prop_assert_eq!(total, whole.priced(&p));
        }
    }
}
