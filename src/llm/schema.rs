//! Structured output: whether the stages ask for a JSON Schema, and a checker for the schemas
//! they build.
//!
//! The stages build one schema per call from the call's inputs (see `pipeline::nuggets`,
//! `pipeline::variants`, `pipeline::judge`) and put it in [`ChatParams::json_schema`]; servers get it
//! as `response_format` `json_schema`, the native backend compiles it to a token mask. Every
//! schema stays in the subset that llama.cpp's json-schema-to-grammar, vLLM (xgrammar, outlines)
//! and llguidance all accept: [`PORTABLE_KEYWORDS`], no `pattern`, no `$ref`. [`validate`] checks
//! an answer against such a schema, so a stage can tell (and count) answers that a constrained
//! backend should never have produced: a server bug, or an answer cut off at `max_tokens`.
//!
//! [`ChatParams::json_schema`]: super::ChatParams::json_schema

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Whether the LLM stages send each call's JSON Schema (`[llm] structured_output`,
/// `--llm-structured-output`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// Every call carries its schema (servers: `response_format` `json_schema`; a server that
    /// refuses it gets the same request without it, once per client).
    #[default]
    JsonSchema,
    /// No schema is sent: the prompt describes the shape and the lenient parser with repair
    /// requests does the rest.
    Off,
}

impl StructuredOutput {
    /// The name used in configs and summaries (`json_schema`, `off`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JsonSchema => "json_schema",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for StructuredOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The keywords our schemas may use: those every grammar engine we target enforces (`title`
/// is an annotation every engine ignores; it names the schema in `response_format`). Not
/// `uniqueItems`: llama.cpp's grammar cannot express it, so an answer that matches the
/// grammar could still break the schema; a schema must make every valid answer a matter of
/// shape alone (the judge gives a verdict per nugget instead of a list of distinct labels).
pub const PORTABLE_KEYWORDS: &[&str] = &[
    "title",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "enum",
    "const",
    "minLength",
    "maxLength",
];

/// `value` with every object's keys in sorted order. The schemas' property order is their
/// generation order (engines emit properties as listed), and serde_json keeps insertion order
/// or sorts depending on a feature another crate may turn on (llguidance does): sorting here
/// makes the order, and so the answers and the cache keys, the same either way.
pub fn sorted_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted_keys(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted_keys).collect()),
        other => other,
    }
}

/// The `maxLength` of a string field that `tokens` tokens of the answer budget must be able to
/// hold: 1.5 characters per token, at least 16, at most `cap`. English and code average 3 to 4,
/// but a small model looping under a grammar does not (SmolLM2 wrote `fuse_fuse_...` at 1.7
/// characters per token until max_tokens cut its JSON). The stages share `max_tokens` out among
/// their fields with it, so that a schema can be satisfied before the answer is cut off.
pub fn chars_within_tokens(tokens: usize, cap: usize) -> usize {
    (tokens.saturating_mul(3) / 2).clamp(16, cap.max(16))
}

/// Checks that `schema` only uses [`PORTABLE_KEYWORDS`] (recursively), that every object lists
/// all its properties as required and forbids others, and that `required` follows `properties`
/// order (the order the model generates them in). Returns the first offence with its path.
pub fn check_portable(schema: &Value) -> std::result::Result<(), String> {
    check_portable_at(schema, "$")
}

fn check_portable_at(schema: &Value, path: &str) -> std::result::Result<(), String> {
    let Value::Object(map) = schema else {
        return match schema {
            Value::Bool(_) => Ok(()),
            other => Err(format!("{path}: a schema must be an object, not {other}")),
        };
    };
    for key in map.keys() {
        if !PORTABLE_KEYWORDS.contains(&key.as_str()) {
            return Err(format!(
                "{path}: keyword {key:?} is outside the portable subset"
            ));
        }
    }
    if let Some(Value::Object(props)) = map.get("properties") {
        let names: Vec<&str> = props.keys().map(String::as_str).collect();
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if required != names {
            return Err(format!(
                "{path}: required {required:?} must list every property in order {names:?}"
            ));
        }
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(format!("{path}: additionalProperties must be false"));
        }
        for (name, sub) in props {
            check_portable_at(sub, &format!("{path}.{name}"))?;
        }
    }
    if let Some(items) = map.get("items") {
        check_portable_at(items, &format!("{path}[*]"))?;
    }
    if let Some(Value::Array(prefix)) = map.get("prefixItems") {
        for (i, sub) in prefix.iter().enumerate() {
            check_portable_at(sub, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

/// Checks `value` against `schema` (the [`PORTABLE_KEYWORDS`] subset; lengths in characters).
/// Returns the first mismatch, with its JSON path (`$.judgments[2].supported[0]`).
pub fn validate(schema: &Value, value: &Value) -> std::result::Result<(), String> {
    validate_at(schema, value, "$")
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(value: &Value, wanted: &str) -> bool {
    let got = type_name(value);
    got == wanted || (wanted == "number" && got == "integer")
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}...", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

fn validate_at(schema: &Value, value: &Value, path: &str) -> std::result::Result<(), String> {
    let map = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(format!("{path}: no value is allowed here")),
        Value::Object(map) => map,
        _ => return Ok(()),
    };
    match map.get("type") {
        Some(Value::String(t)) if !has_type(value, t) => {
            return Err(format!("{path}: expected {t}, got {}", type_name(value)));
        }
        Some(Value::Array(types))
            if !types
                .iter()
                .filter_map(Value::as_str)
                .any(|t| has_type(value, t)) =>
        {
            return Err(format!(
                "{path}: {} is not an allowed type",
                type_name(value)
            ));
        }
        _ => {}
    }
    if let Some(c) = map.get("const")
        && c != value
    {
        return Err(format!(
            "{path}: expected {}, got {}",
            short(c),
            short(value)
        ));
    }
    if let Some(Value::Array(allowed)) = map.get("enum")
        && !allowed.contains(value)
    {
        return Err(format!(
            "{path}: {} is not one of the allowed values",
            short(value)
        ));
    }
    if let Value::String(s) = value {
        let chars = s.chars().count() as u64;
        if let Some(min) = map.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            return Err(format!("{path}: {chars} characters, fewer than {min}"));
        }
        if let Some(max) = map.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            return Err(format!("{path}: {chars} characters, more than {max}"));
        }
    }
    if let Value::Array(items) = value {
        let n = items.len() as u64;
        if let Some(min) = map.get("minItems").and_then(Value::as_u64)
            && n < min
        {
            return Err(format!("{path}: {n} items, fewer than {min}"));
        }
        if let Some(max) = map.get("maxItems").and_then(Value::as_u64)
            && n > max
        {
            return Err(format!("{path}: {n} items, more than {max}"));
        }
        let prefix = map
            .get("prefixItems")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            match prefix.get(i) {
                Some(sub) => validate_at(sub, item, &item_path)?,
                None => {
                    if let Some(sub) = map.get("items") {
                        validate_at(sub, item, &item_path)?;
                    }
                }
            }
        }
    }
    if let Value::Object(fields) = value {
        let props = map.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = map.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !fields.contains_key(name) {
                    return Err(format!("{path}: field {name:?} is missing"));
                }
            }
        }
        for (name, field) in fields {
            let field_path = format!("{path}.{name}");
            match props.and_then(|p| p.get(name)) {
                Some(sub) => validate_at(sub, field, &field_path)?,
                None => {
                    if let Some(extra) = map.get("additionalProperties") {
                        validate_at(extra, field, &field_path)
                            .map_err(|_| format!("{path}: field {name:?} is not allowed"))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Checks a raw answer against `schema`: the whole answer must be one JSON value (what a
/// constrained backend returns) that matches. The error says what is wrong, and whether the
/// JSON looks cut off (as when `max_tokens` ends the answer inside it).
pub fn check_answer(schema: &Value, raw: &str) -> std::result::Result<(), String> {
    let value: Value = match serde_json::from_str(raw.trim()) {
        Ok(v) => v,
        Err(e) if e.is_eof() => {
            return Err(format!(
                "the answer ends inside its JSON ({e}): cut off at max_tokens?"
            ));
        }
        Err(e) => return Err(format!("the answer is not one JSON value ({e})")),
    };
    validate(schema, &value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 2,
                    "items": {"type": "string", "minLength": 1, "maxLength": 5}
                },
                "pair": {
                    "type": "array",
                    "prefixItems": [{"const": "D1"}, {"enum": ["a", "b"]}],
                    "items": false
                }
            },
            "required": ["items", "pair"],
            "additionalProperties": false
        })
    }

    #[test]
    fn accepts_matching_values() {
        validate(&schema(), &json!({"items": ["ab"], "pair": ["D1", "b"]})).unwrap();
        check_portable(&schema()).unwrap();
    }

    #[test]
    fn names_the_path_of_each_mismatch() {
        let s = schema();
        let cases = [
            (
                json!({"items": [], "pair": ["D1", "a"]}),
                "$.items: 0 items",
            ),
            (
                json!({"items": ["a", "b", "c"], "pair": ["D1", "a"]}),
                "more than 2",
            ),
            (
                json!({"items": ["a", 2], "pair": ["D1", "a"]}),
                "$.items[1]: expected string",
            ),
            (json!({"items": [""], "pair": ["D1", "a"]}), "fewer than 1"),
            (
                json!({"items": ["abcdef"], "pair": ["D1", "a"]}),
                "$.items[0]: 6 characters",
            ),
            (
                json!({"items": [1], "pair": ["D1", "a"]}),
                "expected string",
            ),
            (json!({"items": ["a"], "pair": ["D2", "a"]}), "$.pair[0]"),
            (json!({"items": ["a"], "pair": ["D1", "c"]}), "$.pair[1]"),
            (
                json!({"items": ["a"], "pair": ["D1", "a", "x"]}),
                "$.pair[2]: no value",
            ),
            (json!({"items": ["a"]}), "\"pair\" is missing"),
            (
                json!({"items": ["a"], "pair": ["D1", "a"], "x": 1}),
                "\"x\" is not allowed",
            ),
            (json!(["a"]), "expected object"),
        ];
        for (value, want) in cases {
            let err = validate(&s, &value).unwrap_err();
            assert!(err.contains(want), "{value}: {err}");
        }
    }

    #[test]
    fn raw_answers_must_be_one_json_value() {
        let s = schema();
        check_answer(&s, " {\"items\": [\"a\"], \"pair\": [\"D1\", \"a\"]}\n").unwrap();
        let err = check_answer(&s, "{\"items\": [\"a\"], \"pa").unwrap_err();
        assert!(err.contains("cut off"), "{err}");
        let err = check_answer(&s, "Sure: {\"items\": []}").unwrap_err();
        assert!(err.contains("not one JSON value"), "{err}");
    }

    #[test]
    fn portability_check_rejects_what_engines_differ_on() {
        let err = check_portable(&json!({"type": "string", "pattern": "^a$"})).unwrap_err();
        assert!(err.contains("pattern"), "{err}");
        let err = check_portable(&json!({"$ref": "#/x"})).unwrap_err();
        assert!(err.contains("$ref"), "{err}");
        // llama.cpp's grammar cannot enforce it (issue 17: SmolLM2 repeated a judge label).
        let unique = json!({"type": "array", "items": {"enum": ["N1"]}, "uniqueItems": true});
        let err = check_portable(&unique).unwrap_err();
        assert!(err.contains("uniqueItems"), "{err}");
        let unordered = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "required": ["b", "a"],
            "additionalProperties": false
        });
        assert!(check_portable(&unordered).unwrap_err().contains("in order"));
        let open = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "required": ["a"]
        });
        assert!(
            check_portable(&open)
                .unwrap_err()
                .contains("additionalProperties")
        );
    }

    #[test]
    fn string_budgets() {
        assert_eq!(chars_within_tokens(20, 300), 30);
        assert_eq!(chars_within_tokens(0, 300), 16);
        assert_eq!(chars_within_tokens(1000, 300), 300);
    }

    #[test]
    fn mode_names() {
        assert_eq!(StructuredOutput::default(), StructuredOutput::JsonSchema);
        assert_eq!(StructuredOutput::Off.to_string(), "off");
        let parsed: StructuredOutput = serde_json::from_str("\"json_schema\"").unwrap();
        assert_eq!(parsed, StructuredOutput::JsonSchema);
    }
}
