//! Jupyter notebooks as text: markdown cells as they are, code cells as fenced code blocks in the
//! kernel's language, outputs dropped. Offsets of notebook documents refer to this rendering.

use serde_json::Value;

/// Renders a notebook's JSON to Markdown-like text, or `None` when it is not a notebook.
pub fn notebook_text(json: &str) -> Option<String> {
    let notebook: Value = serde_json::from_str(json).ok()?;
    let cells = notebook.get("cells")?.as_array()?;
    let language = notebook
        .pointer("/metadata/kernelspec/language")
        .or_else(|| notebook.pointer("/metadata/language_info/name"))
        .and_then(Value::as_str)
        .unwrap_or("python");
    let mut out = String::new();
    for cell in cells {
        let source = match cell.get("source") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(lines)) => lines.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        if source.trim().is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        match cell.get("cell_type").and_then(Value::as_str) {
            Some("code") => {
                out.push_str("```");
                out.push_str(language);
                out.push('\n');
                out.push_str(source.trim_end());
                out.push_str("\n```");
            }
            _ => out.push_str(source.trim_end()),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cells_and_drops_outputs() {
        let nb = r##"{"cells": [
            {"cell_type": "markdown", "source": ["# Title\n", "Some pipeline text"]},
            {"cell_type": "code", "source": "!pip install x\nimport os", "outputs": [{"text": "SECRET OUTPUT"}]},
            {"cell_type": "code", "source": []}
        ], "metadata": {"kernelspec": {"language": "python"}}}"##;
        let text = notebook_text(nb).unwrap();
        assert_eq!(
            text,
            "# Title\nSome pipeline text\n\n```python\n!pip install x\nimport os\n```"
        );
        assert!(notebook_text("not json").is_none());
        assert!(notebook_text("{\"x\": 1}").is_none());
    }
}
