//! Our own prompts (the paper's were not released), as versioned text files compiled into the
//! binary. A file has `=== system ===` / `=== user ===` sections and `{{name}}` placeholders.
//! Changing a prompt means a new file (`*.v2.txt`) and a new constant: prompt text is part of the
//! cache key, so old answers are then simply not reused, and the id is part of the stage
//! fingerprints of `freshstack build`, so a build reruns the stage.
//!
//! Version 2 (structured output): the prompts describe the answer's shape in words and show no
//! example answer (a small model copied v1's `"first nugget"` placeholders verbatim); the JSON
//! Schema sent with each call enforces the shape. The judge's chain of thought moved from free
//! text before the JSON into a `reasoning` field of each entry, before its verdict. The same
//! prompts serve `structured_output = "off"`. The v1 texts are in the history.
//!
//! Judge version 3: `supported` is an object with one true/false verdict per nugget label
//! instead of a list of the supported labels (a list of distinct labels needs `uniqueItems`,
//! which llama.cpp's grammar cannot enforce; see `pipeline::judge_schema`). The v2 text is in
//! the history.
//!
//! Judge version 4: the text before the documents no longer names their number, so every
//! call for one question starts with the same tokens (instructions, question, nuggets) and a
//! native model reuses their keys and values from the previous call (v3 named the number in its
//! first paragraph, so a question's 10- and 8-document calls shared only the system message).

use super::{Message, Role};
use crate::error::{Error, Result};

/// A prompt template.
#[derive(Debug, Clone, Copy)]
pub struct Prompt {
    /// Name with version, e.g. `nuggets.v1` (recorded in stage summaries).
    pub id: &'static str,
    text: &'static str,
}

/// Question + accepted answer -> nuggets, grading-notes style (paper §3.3).
/// Placeholders: `title`, `question`, `answer`, `max_nuggets`.
pub const NUGGETS: Prompt = Prompt {
    id: "nuggets.v3",
    text: include_str!("nuggets.v3.txt"),
};

/// Question only -> sub-questions and a closed-book answer (paper §3.4, inference setting).
/// Placeholders: `title`, `question`, `max_sub_questions`.
pub const QUERY_VARIANTS: Prompt = Prompt {
    id: "query-variants.v2",
    text: include_str!("query-variants.v2.txt"),
};

/// Question, its nuggets and up to N documents -> per document, in order, a short chain of
/// thought then a verdict per nugget (paper §3.5). Placeholders: `title`, `question`,
/// `nuggets`, `num_nuggets`, `nugget_range` (`N1 to N5`), `documents`, `num_docs`.
pub const JUDGE: Prompt = Prompt {
    id: "judge.v4",
    text: include_str!("judge.v4.txt"),
};

/// One document and one nugget -> `yes` or `no`, read as the probability of `yes` (the
/// `probability` verdict). The document comes first, so that the calls for every nugget about
/// one document share its tokens and a native model computes them once. Placeholders:
/// `doc_id`, `document`, `nugget`.
pub const JUDGE_POINTWISE: Prompt = Prompt {
    id: "judge-pointwise.v1",
    text: include_str!("judge-pointwise.v1.txt"),
};

/// One document and one nugget -> `{"quote": ..., "supported": ...}`: the document's sentence
/// or line that states the nugget, then the verdict (the `quote` verdict; the quote is checked
/// against the document). Document first, as in [`JUDGE_POINTWISE`]. Placeholders: `doc_id`,
/// `document`, `nugget`.
pub const JUDGE_QUOTE: Prompt = Prompt {
    id: "judge-quote.v1",
    text: include_str!("judge-quote.v1.txt"),
};

/// One document and one nugget -> `full`, `partial` or `none`, read as the probability of
/// each grade (the `graded` verdict, TREC 2025's support assessment). Document first, as in
/// [`JUDGE_POINTWISE`]. Placeholders: `doc_id`, `document`, `nugget`.
pub const JUDGE_GRADED: Prompt = Prompt {
    id: "judge-graded.v1",
    text: include_str!("judge-graded.v1.txt"),
};

/// Follow-up when an answer cannot be parsed. Placeholders: `problem`, `format`.
pub const REPAIR: Prompt = Prompt {
    id: "repair.v1",
    text: include_str!("repair.v1.txt"),
};

impl Prompt {
    /// The messages with every `{{name}}` replaced by its value from `vars`. Values are inserted
    /// verbatim and not scanned again (documents may contain `{{`). A placeholder without a value
    /// is an error (a bug in the caller).
    pub fn render(&self, vars: &[(&str, &str)]) -> Result<Vec<Message>> {
        let mut messages = Vec::new();
        let mut current: Option<(Role, String)> = None;
        for line in self.text.lines() {
            let header = match line.trim() {
                "=== system ===" => Some(Role::System),
                "=== user ===" => Some(Role::User),
                "=== assistant ===" => Some(Role::Assistant),
                _ => None,
            };
            if let Some(role) = header {
                if let Some((role, body)) = current.take() {
                    messages.push(Message {
                        role,
                        content: body.trim().to_string(),
                    });
                }
                current = Some((role, String::new()));
            } else if let Some((_, body)) = current.as_mut() {
                body.push_str(line);
                body.push('\n');
            }
        }
        if let Some((role, body)) = current {
            messages.push(Message {
                role,
                content: body.trim().to_string(),
            });
        }
        for message in &mut messages {
            message.content = self.fill(&message.content, vars)?;
        }
        Ok(messages)
    }

    fn fill(&self, template: &str, vars: &[(&str, &str)]) -> Result<String> {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(open) = rest.find("{{") {
            out.push_str(&rest[..open]);
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| {
                Error::invalid_config(format!("prompt {}", self.id), "unclosed {{ placeholder")
            })?;
            let name = after[..close].trim();
            let value = vars
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    Error::invalid_config(
                        format!("prompt {}", self.id),
                        format!("no value for placeholder {name}"),
                    )
                })?;
            out.push_str(value);
            rest = &after[close + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_sections_and_values_verbatim() {
        let msgs = NUGGETS
            .render(&[
                ("title", "T"),
                ("question", "uses {{title}} literally"),
                ("answer", "A"),
                ("max_nuggets", "5"),
            ])
            .unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].role, Role::System);
        assert_eq!(msgs[1].role, Role::User);
        assert!(msgs[1].content.contains("Question title: T"));
        assert!(msgs[1].content.contains("uses {{title}} literally"));
        assert!(msgs[1].content.contains("between 1 and 5 nuggets"));
    }

    #[test]
    fn missing_value_is_an_error() {
        let err = REPAIR.render(&[("problem", "x")]).unwrap_err().to_string();
        assert!(err.contains("format"), "{err}");
    }

    #[test]
    fn every_prompt_renders() {
        let all = [
            "title",
            "question",
            "answer",
            "max_nuggets",
            "max_sub_questions",
            "nuggets",
            "num_nuggets",
            "nugget_range",
            "documents",
            "num_docs",
            "problem",
            "format",
        ];
        let vars: Vec<(&str, &str)> = all.iter().map(|k| (*k, "v")).collect();
        for prompt in [NUGGETS, QUERY_VARIANTS, JUDGE, REPAIR] {
            let msgs = prompt.render(&vars).unwrap();
            assert!(!msgs.is_empty(), "{}", prompt.id);
            assert!(
                msgs.iter().all(|m| !m.content.contains("{{")),
                "{}",
                prompt.id
            );
        }
    }

    /// Regression (issue 17): SmolLM2 copied v1's example answers ("first nugget") verbatim.
    #[test]
    fn prompts_show_no_example_answer_to_copy() {
        for prompt in [NUGGETS, QUERY_VARIANTS, JUDGE] {
            for placeholder in [
                "\"first nugget",
                "\"second",
                "\"your answer",
                "\"one short sentence",
            ] {
                assert!(
                    !prompt.text.contains(placeholder),
                    "{} shows {placeholder:?}",
                    prompt.id
                );
            }
            assert!(
                !prompt.text.contains("{\""),
                "{} shows a JSON example",
                prompt.id
            );
        }
    }
}
