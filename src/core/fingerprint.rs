//! The agent fingerprint (M10): what an agent *is*, so a resume can tell what changed.
//!
//! Parts are stored one by one (model id, each tool's schema hash, instructions hash) so a mismatch can name
//! what changed; `hash` is a short SHA-256 over all of them. Code (a tool's `execute`, hooks) is not part of it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// An agent's fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct Fingerprint {
    /// Model id.
    pub model: String,
    /// Tool name → SHA-256 (hex, 16 chars) of the canonical JSON of its input schema.
    pub tools: BTreeMap<String, String>,
    /// SHA-256 (hex, 16 chars) of the instructions.
    pub instructions: String,
    /// Short SHA-256 (hex, 16 chars) over all parts.
    pub hash: String,
}

/// What changed between two fingerprints (the `agent.drift` event's payload).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
#[serde(rename_all = "camelCase")]
pub struct AgentDrift {
    /// `{from, to}` when the model changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub model: Option<ModelChange>,
    /// Tools the current agent has and the checkpoint's agent had not.
    pub tools_added: Vec<String>,
    /// Tools the checkpoint's agent had and the current one has not.
    pub tools_removed: Vec<String>,
    /// Tools whose input schema changed.
    pub tools_changed: Vec<String>,
    /// Whether the instructions changed.
    pub instructions: bool,
}

/// A model change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS), ts(export))]
pub struct ModelChange {
    /// Model in the checkpoint.
    pub from: String,
    /// Model now.
    pub to: String,
}

impl AgentDrift {
    /// Whether anything changed.
    pub fn is_empty(&self) -> bool {
        self.model.is_none()
            && self.tools_added.is_empty()
            && self.tools_removed.is_empty()
            && self.tools_changed.is_empty()
            && !self.instructions
    }

    /// A one-line description ("model a → b; tools added: x; …").
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.model {
            parts.push(format!("model {} → {}", m.from, m.to));
        }
        for (label, list) in [
            ("tools added", &self.tools_added),
            ("tools removed", &self.tools_removed),
            ("tools changed", &self.tools_changed),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label}: {}", list.join(", ")));
            }
        }
        if self.instructions {
            parts.push("instructions changed".into());
        }
        parts.join("; ")
    }

    /// The operator warning for run `run_id` resumed by a changed agent under `onAgentDrift: warn`.
    pub fn warning(&self, run_id: &str) -> String {
        format!(
            "steadfast: run '{run_id}' was resumed by a changed agent ({}); it continues (onAgentDrift: \"warn\"; \
             \"error\" refuses such a resume, \"ignore\" silences this)",
            self.describe()
        )
    }
}

/// Hex SHA-256 of bytes, full length.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from_digit((b >> 4) as u32, 16).unwrap());
        out.push(char::from_digit((b & 0xf) as u32, 16).unwrap());
    }
    out
}

fn short(bytes: &[u8]) -> String {
    sha256_hex(bytes)[..16].to_string()
}

/// Canonical JSON: object keys sorted (serde_json's default map is ordered), no whitespace.
pub fn canonical_json(v: &Value) -> String {
    // serde_json without `preserve_order` stores objects in a BTreeMap, so keys come out sorted.
    // Ignored: a `Value` always serialises (its map keys are strings).
    serde_json::to_string(v).unwrap_or_default()
}

impl Fingerprint {
    /// Computes the fingerprint of an agent from its parts.
    pub fn compute<'a>(
        model: &str,
        tools: impl IntoIterator<Item = (&'a str, &'a Value)>,
        instructions: &str,
    ) -> Fingerprint {
        // Built by inserts, not `collect` (which sorts with a ~3 KB instance of the standard sort).
        let mut by_name = BTreeMap::new();
        by_name.extend(
            tools.into_iter().map(|(name, schema)| (name.to_string(), short(canonical_json(schema).as_bytes()))),
        );
        let tools: BTreeMap<String, String> = by_name;
        let instructions = short(instructions.as_bytes());
        let mut all = String::new();
        all.push_str("model=");
        all.push_str(model);
        for (name, h) in &tools {
            all.push_str("\ntool=");
            all.push_str(name);
            all.push(':');
            all.push_str(h);
        }
        all.push_str("\ninstructions=");
        all.push_str(&instructions);
        Fingerprint { model: model.to_string(), tools, instructions, hash: short(all.as_bytes()) }
    }

    /// What changed from `saved` (the checkpoint's) to `self` (the current agent's).
    pub fn drift_from(&self, saved: &Fingerprint) -> AgentDrift {
        let mut d = AgentDrift::default();
        if self.model != saved.model {
            d.model = Some(ModelChange { from: saved.model.clone(), to: self.model.clone() });
        }
        for (name, h) in &self.tools {
            match saved.tools.get(name) {
                None => d.tools_added.push(name.clone()),
                Some(old) if old != h => d.tools_changed.push(name.clone()),
                _ => {}
            }
        }
        for name in saved.tools.keys() {
            if !self.tools.contains_key(name) {
                d.tools_removed.push(name.clone());
            }
        }
        d.instructions = self.instructions != saved.instructions;
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_hash() {
        let a: Value =
            serde_json::from_str(r#"{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"number"}}}"#)
                .unwrap();
        let b: Value =
            serde_json::from_str(r#"{"properties":{"a":{"type":"number"},"b":{"type":"string"}},"type":"object"}"#)
                .unwrap();
        let fa = Fingerprint::compute("m", [("t", &a)], "be nice");
        let fb = Fingerprint::compute("m", [("t", &b)], "be nice");
        assert_eq!(fa, fb);
        assert_eq!(fa.hash.len(), 16);
    }

    #[test]
    fn drift_names_what_changed() {
        let s1 = json!({"type":"object"});
        let s2 = json!({"type":"object","required":["x"]});
        let saved = Fingerprint::compute("m1", [("keep", &s1), ("gone", &s1), ("changed", &s1)], "a");
        let now = Fingerprint::compute("m2", [("keep", &s1), ("new", &s1), ("changed", &s2)], "b");
        let d = now.drift_from(&saved);
        assert_eq!(d.model, Some(ModelChange { from: "m1".into(), to: "m2".into() }));
        assert_eq!(d.tools_added, vec!["new"]);
        assert_eq!(d.tools_removed, vec!["gone"]);
        assert_eq!(d.tools_changed, vec!["changed"]);
        assert!(d.instructions);
        assert!(!d.is_empty());
        assert_ne!(now.hash, saved.hash);
        assert!(now.drift_from(&now).is_empty());
        assert!(d.describe().contains("tools removed: gone"));
    }

    #[test]
    fn sha256_known_vector() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
