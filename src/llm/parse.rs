//! Robust parsing of model output: models wrap JSON in prose and code fences, think aloud
//! before answering, use Python list syntax or plain numbered lists. These functions find the
//! structured part wherever it is; `None` means "not found", which the stages answer with a
//! repair request, never with a default value.

use serde_json::Value;

/// Removes `<think>...</think>` blocks (reasoning models), keeping what follows the last one.
/// An unfinished block (`<think>` never closed: the answer was cut off while thinking) is not
/// an answer: only what precedes it is kept, so drafts inside it are never taken for the answer.
pub fn strip_thinking(text: &str) -> &str {
    if let Some(end) = text.rfind("</think>") {
        return &text[end + "</think>".len()..];
    }
    match text.find("<think>") {
        Some(start) => &text[..start],
        None => text,
    }
}

/// The contents of every fenced code block (```` ``` ```` or `~~~`, any info string), in order.
pub fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        // Skip the info string (e.g. `json`) up to the end of the line.
        let body_start = after.find('\n').map(|i| i + 1).unwrap_or(after.len());
        let body = &after[body_start..];
        match body.find("```") {
            Some(end) => {
                blocks.push(&body[..end]);
                rest = &body[end + 3..];
            }
            None => {
                // An unclosed fence (answer cut off): take the rest.
                blocks.push(body);
                break;
            }
        }
    }
    blocks
}

/// The end (exclusive) of the balanced `{...}` / `[...]` span that opens at `start`, skipping
/// brackets inside JSON strings.
fn balanced_end(text: &str, start: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut stack: Vec<u8> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => stack.push(b'}'),
            b'[' => stack.push(b']'),
            b'}' | b']' => {
                if stack.pop() != Some(b) {
                    return None;
                }
                if stack.is_empty() {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Removes trailing commas before `}` / `]` (a frequent model slip), outside strings.
fn drop_trailing_commas(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut in_string = false;
    let mut escaped = false;
    for (i, &c) in chars.iter().enumerate() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        if c == ',' {
            let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

fn parse_json_lenient(candidate: &str) -> Option<Value> {
    let trimmed = candidate.trim();
    if trimmed.is_empty() {
        return None;
    }
    serde_json::from_str(trimmed)
        .ok()
        .or_else(|| serde_json::from_str(&drop_trailing_commas(trimmed)).ok())
}

/// The first JSON object or array in `text`: the whole text, else a fenced block, else the
/// first balanced `{...}`/`[...]` span that parses. Trailing commas are forgiven.
pub fn extract_json(text: &str) -> Option<Value> {
    let text = strip_thinking(text);
    if let Some(v) = parse_json_lenient(text).filter(|v| v.is_object() || v.is_array()) {
        return Some(v);
    }
    for block in fenced_blocks(text) {
        if let Some(v) = parse_json_lenient(block).filter(|v| v.is_object() || v.is_array()) {
            return Some(v);
        }
    }
    for (start, c) in text.char_indices() {
        if (c == '{' || c == '[')
            && let Some(end) = balanced_end(text, start)
            && let Some(v) = parse_json_lenient(&text[start..end])
        {
            return Some(v);
        }
    }
    None
}

/// The LAST JSON object in `text` that has the field `key` (a chain-of-thought answer may quote
/// JSON-like fragments before its final verdict), searched in fences and bare spans.
pub fn extract_json_with_key(text: &str, key: &str) -> Option<serde_json::Map<String, Value>> {
    let text = strip_thinking(text);
    let starts: Vec<usize> = text.match_indices('{').map(|(i, _)| i).collect();
    for &start in starts.iter().rev() {
        if let Some(end) = balanced_end(text, start)
            && let Some(Value::Object(map)) = parse_json_lenient(&text[start..end])
            && map.contains_key(key)
        {
            return Some(map);
        }
    }
    None
}

/// A JSON object found by [`extract_json`] (an array holding one object also counts).
pub fn extract_json_object(text: &str) -> Option<serde_json::Map<String, Value>> {
    match extract_json(text)? {
        Value::Object(map) => Some(map),
        Value::Array(items) => {
            let mut objects = items.into_iter().filter_map(|v| match v {
                Value::Object(m) => Some(m),
                _ => None,
            });
            let first = objects.next()?;
            objects.next().is_none().then_some(first)
        }
        _ => None,
    }
}

/// A Python list literal of strings (`['a', "b"]`), as castorini/nuggetizer's prompts elicit.
pub fn parse_python_list(text: &str) -> Option<Vec<String>> {
    let start = text.find('[')?;
    let mut chars = text[start + 1..].chars().peekable();
    let mut items = Vec::new();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        match chars.next()? {
            ']' => return (!items.is_empty()).then_some(items),
            quote @ ('\'' | '"') => {
                let mut item = String::new();
                loop {
                    match chars.next()? {
                        '\\' => match chars.next()? {
                            'n' => item.push('\n'),
                            't' => item.push('\t'),
                            other => item.push(other),
                        },
                        c if c == quote => break,
                        c => item.push(c),
                    }
                }
                items.push(item);
            }
            _ => return None,
        }
    }
}

/// Strips a list marker (`1.`, `1)`, `(1)`, `-`, `*`, `+`, `•`) from the start of a line;
/// `None` when the line has none.
fn strip_list_marker(line: &str) -> Option<&str> {
    let line = line.trim_start();
    for bullet in ["- ", "* ", "+ ", "• ", "– "] {
        if let Some(rest) = line.strip_prefix(bullet) {
            return Some(rest);
        }
    }
    let inner = line.strip_prefix('(').unwrap_or(line);
    let digits = inner.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 3 {
        return None;
    }
    let rest = &inner[digits..];
    let rest = rest
        .strip_prefix(". ")
        .or_else(|| rest.strip_prefix(") "))
        .or_else(|| rest.strip_prefix(": "))?;
    Some(rest)
}

/// Trims an item: whitespace, surrounding quotes, markdown bold markers, a trailing comma.
fn clean_item(item: &str) -> String {
    let mut s = item.trim().trim_end_matches(',').trim();
    for (open, close) in [("\"", "\""), ("'", "'"), ("**", "**"), ("`", "`")] {
        if s.len() >= open.len() + close.len()
            && let Some(inner) = s.strip_prefix(open).and_then(|r| r.strip_suffix(close))
        {
            s = inner.trim();
        }
    }
    s.to_string()
}

/// The lines of a numbered or bulleted list (continuation lines joined to their item).
pub fn parse_markdown_list(text: &str) -> Option<Vec<String>> {
    let mut items: Vec<String> = Vec::new();
    let mut in_item = false;
    for line in text.lines() {
        if let Some(rest) = strip_list_marker(line) {
            items.push(rest.trim().to_string());
            in_item = true;
        } else if line.trim().is_empty() {
            in_item = false;
        } else if in_item && line.starts_with([' ', '\t']) {
            if let Some(last) = items.last_mut() {
                last.push(' ');
                last.push_str(line.trim());
            }
        } else {
            in_item = false;
        }
    }
    let items: Vec<String> = items
        .iter()
        .map(|s| clean_item(s))
        .filter(|s| !s.is_empty())
        .collect();
    (!items.is_empty()).then_some(items)
}

/// Strings of a JSON array; non-string items (numbers) are written as JSON, objects are read
/// through a `text`/`nugget`/`content` field.
fn strings_of(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter_map(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Object(m) => ["text", "nugget", "content", "question"]
                .iter()
                .find_map(|k| m.get(*k).and_then(Value::as_str).map(str::to_string)),
            Value::Null => None,
            other => Some(other.to_string()),
        })
        .map(|s| clean_item(&s))
        .filter(|s| !s.is_empty())
        .collect()
}

/// A list of strings from any of the shapes models produce: a JSON array, a JSON object whose
/// field `preferred_key` (else its only array field) is an array, a Python list, or a
/// numbered / bulleted list. `None` when there is no non-empty list.
pub fn extract_string_list(text: &str, preferred_key: &str) -> Option<Vec<String>> {
    let text = strip_thinking(text);
    match extract_json(text) {
        Some(Value::Array(items)) => {
            let list = strings_of(&items);
            if !list.is_empty() {
                return Some(list);
            }
        }
        Some(Value::Object(map)) => {
            let array = map
                .get(preferred_key)
                .and_then(Value::as_array)
                .or_else(|| {
                    let mut arrays = map.values().filter_map(Value::as_array);
                    let first = arrays.next();
                    if arrays.next().is_none() { first } else { None }
                });
            if let Some(items) = array {
                let list = strings_of(items);
                if !list.is_empty() {
                    return Some(list);
                }
            }
        }
        _ => {}
    }
    parse_python_list(text).or_else(|| parse_markdown_list(text))
}

/// The complete strings of a JSON list under `"key"` that the answer's end cut off
/// (`{"key": ["a", "b", "c...`): `["a", "b"]`, and whether a last string was cut. `None` when
/// there is no such list or it is closed (then [`extract_string_list`] reads it).
pub fn strings_before_cut(text: &str, key: &str) -> Option<(Vec<String>, bool)> {
    let quoted = format!("\"{key}\"");
    let after_key = &text[text.find(&quoted)? + quoted.len()..];
    let rest = after_key
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('[')?;
    let mut strings = Vec::new();
    let mut pos = 0;
    let bytes = rest.as_bytes();
    loop {
        while pos < bytes.len() && (bytes[pos].is_ascii_whitespace() || bytes[pos] == b',') {
            pos += 1;
        }
        match bytes.get(pos) {
            None => return Some((strings, false)),
            Some(b']') => return None,
            Some(b'"') => {}
            Some(_) => return None,
        }
        // The closing quote: the first `"` not escaped by an odd run of backslashes.
        let mut end = pos + 1;
        let mut escaped = false;
        while end < bytes.len() && (escaped || bytes[end] != b'"') {
            escaped = !escaped && bytes[end] == b'\\';
            end += 1;
        }
        if end >= bytes.len() {
            return Some((strings, true));
        }
        strings.push(serde_json::from_str::<String>(&rest[pos..=end]).ok()?);
        pos = end + 1;
    }
}

/// Reads a yes/no verdict: JSON booleans, 1/0, and the words yes/no, true/false, supported /
/// not supported (case-insensitive).
pub fn parse_verdict(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_i64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        },
        Value::String(s) => {
            let s = s.trim().to_ascii_lowercase();
            let s = s.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            match s {
                "yes" | "true" | "supported" | "support" | "y" | "1" => Some(true),
                "no" | "false" | "not supported" | "unsupported" | "not_supported" | "n" | "0" => {
                    Some(false)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The first integer in a value: `3`, `"3"`, `"D3"`, `"[3]"`, `"Nugget 3"`.
pub fn parse_index(value: &Value) -> Option<usize> {
    match value {
        Value::Number(n) => n.as_u64().map(|n| n as usize),
        Value::String(s) => {
            let digits: String = s
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_before_a_cut_are_kept_and_the_cut_one_flagged() {
        let cut = r#"{"nuggets": ["Use \"x\".", "Set y, then", "Restart the ser"#;
        assert_eq!(
            strings_before_cut(cut, "nuggets"),
            Some((
                vec!["Use \"x\".".to_string(), "Set y, then".to_string()],
                true
            ))
        );
        assert_eq!(
            strings_before_cut(r#"{"nuggets": ["a", "#, "nuggets"),
            Some((vec!["a".to_string()], false))
        );
        assert_eq!(strings_before_cut(r#"{"nuggets": ["a"]}"#, "nuggets"), None);
        assert_eq!(strings_before_cut(r#"{"other": ["a""#, "nuggets"), None);
        assert_eq!(strings_before_cut(r#"{"nuggets": [1, "#, "nuggets"), None);
        assert_eq!(
            strings_before_cut(r#"{"nuggets": ["a\\", "b"#, "nuggets"),
            Some((vec!["a\\".to_string()], true))
        );
    }

    #[test]
    fn json_in_prose_and_fences() {
        let v = extract_json("Sure! Here it is:\n```json\n{\"a\": [1, 2,]}\n```\nHope this helps")
            .unwrap();
        assert_eq!(v["a"][1], 2);
        let v = extract_json("The answer is {\"a\": \"x}\"} and more {\"b\":1}").unwrap();
        assert_eq!(v["a"], "x}");
        assert_eq!(extract_json("<think>draft {\"a\": 0} and more"), None);
        assert_eq!(
            strip_thinking("<think>\n\n</think>\n\nanswer"),
            "\n\nanswer"
        );
        let v = extract_json("<think>maybe {\"a\":0}</think>\n{\"a\": 1}").unwrap();
        assert_eq!(v["a"], 1);
        assert!(extract_json("no json here [at all").is_none());
        assert!(extract_json("").is_none());
        // A cut-off fence still yields its JSON when the JSON itself is complete.
        let v = extract_json("```json\n{\"a\": 3}\n").unwrap();
        assert_eq!(v["a"], 3);
    }

    #[test]
    fn last_object_with_key() {
        let text = "Thinking: D1 has {\"x\": 1}.\n{\"judgments\": [1]}\ntrailing {\"other\": 2}";
        let map = extract_json_with_key(text, "judgments").unwrap();
        assert_eq!(map["judgments"][0], 1);
        assert!(extract_json_with_key("{\"a\": 1}", "judgments").is_none());
    }

    #[test]
    fn lists_from_every_shape() {
        let want = vec!["alpha".to_string(), "beta".to_string()];
        for text in [
            r#"["alpha", "beta"]"#,
            r#"{"nuggets": ["alpha", "beta"]}"#,
            r#"{"items": ["alpha", "beta"], "note": "x"}"#,
            "```\n['alpha', 'beta']\n```",
            "Nuggets:\n1. alpha\n2. beta\n",
            "Here:\n- **alpha**\n- \"beta\"\n\nThat's all.",
            "1) alpha\n2) beta",
            r#"[{"text": "alpha"}, {"text": "beta"}]"#,
        ] {
            assert_eq!(
                extract_string_list(text, "nuggets").as_ref(),
                Some(&want),
                "{text}"
            );
        }
        assert_eq!(
            extract_string_list(r#"{"a": ["x"], "b": ["y"], "nuggets": ["z"]}"#, "nuggets"),
            Some(vec!["z".to_string()])
        );
        assert_eq!(
            extract_string_list("I cannot help with that.", "nuggets"),
            None
        );
        assert_eq!(extract_string_list("[]", "nuggets"), None);
        assert_eq!(extract_string_list(r#"{"nuggets": []}"#, "nuggets"), None);
    }

    #[test]
    fn markdown_list_continuations() {
        let text = "1. first item\n   continues here\n2. second\n\nunrelated line";
        assert_eq!(
            parse_markdown_list(text).unwrap(),
            vec!["first item continues here", "second"]
        );
        assert_eq!(parse_markdown_list("2024. A year"), None);
    }

    #[test]
    fn python_lists() {
        assert_eq!(
            parse_python_list(r#"Answer: ['it\'s', "two, three"]"#).unwrap(),
            vec!["it's", "two, three"]
        );
        assert_eq!(parse_python_list("['unterminated"), None);
        assert_eq!(parse_python_list("[1, 2]"), None);
    }

    #[test]
    fn verdicts_and_indices() {
        use serde_json::json;
        assert_eq!(parse_verdict(&json!(true)), Some(true));
        assert_eq!(parse_verdict(&json!("Yes.")), Some(true));
        assert_eq!(parse_verdict(&json!("NOT SUPPORTED")), Some(false));
        assert_eq!(parse_verdict(&json!(0)), Some(false));
        assert_eq!(parse_verdict(&json!("maybe")), None);
        assert_eq!(parse_index(&json!("D12")), Some(12));
        assert_eq!(parse_index(&json!("[3]")), Some(3));
        assert_eq!(parse_index(&json!(4)), Some(4));
        assert_eq!(parse_index(&json!("none")), None);
    }
}
