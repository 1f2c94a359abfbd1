//! How chat messages become one prompt string for a local model: the formats GGUF chat
//! templates use (ChatML, Qwen3's non-thinking ChatML, Llama 3, Llama 2, Gemma), recognised by
//! their markers.

use super::{Message, Role};

/// How messages become one prompt string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatFormat {
    /// `<|im_start|>role\n...<|im_end|>` (Qwen, SmolLM).
    ChatMl,
    /// ChatML whose answer opens with an empty `<think>\n\n</think>\n\n` block: Qwen3's
    /// non-thinking mode (its template's `enable_thinking=false`).
    ChatMlNoThinking,
    /// `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>`.
    Llama3,
    /// `[INST] <<SYS>>...<</SYS>> ... [/INST]`.
    Llama2,
    /// `<bos><start_of_turn>user\n...<end_of_turn>` (system folded into the first user turn).
    Gemma,
}

impl ChatFormat {
    /// The format a GGUF chat template (Jinja source) uses, recognised by its markers.
    pub fn detect(template: Option<&str>, has_im_start: bool) -> Self {
        match template {
            Some(t) if t.contains("<|im_start|>") && t.contains("<think>") => {
                ChatFormat::ChatMlNoThinking
            }
            Some(t) if t.contains("<|im_start|>") => ChatFormat::ChatMl,
            Some(t) if t.contains("<|start_header_id|>") => ChatFormat::Llama3,
            Some(t) if t.contains("<start_of_turn>") => ChatFormat::Gemma,
            Some(t) if t.contains("[INST]") => ChatFormat::Llama2,
            _ if has_im_start => ChatFormat::ChatMl,
            _ => ChatFormat::Llama2,
        }
    }

    /// The prompt for `messages`, ending where the assistant's answer begins.
    pub fn render(self, messages: &[Message]) -> String {
        let role = |r: Role| match r {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let mut out = String::new();
        match self {
            ChatFormat::ChatMl | ChatFormat::ChatMlNoThinking => {
                for m in messages {
                    out.push_str(&format!(
                        "<|im_start|>{}\n{}<|im_end|>\n",
                        role(m.role),
                        m.content
                    ));
                }
                out.push_str("<|im_start|>assistant\n");
                if self == ChatFormat::ChatMlNoThinking {
                    out.push_str("<think>\n\n</think>\n\n");
                }
            }
            ChatFormat::Llama3 => {
                out.push_str("<|begin_of_text|>");
                for m in messages {
                    out.push_str(&format!(
                        "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                        role(m.role),
                        m.content
                    ));
                }
                out.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
            }
            ChatFormat::Gemma | ChatFormat::Llama2 => {
                // Both lack a system role: fold system text into the next user turn.
                let mut pending_system = String::new();
                if self == ChatFormat::Gemma {
                    out.push_str("<bos>");
                }
                for m in messages {
                    match m.role {
                        Role::System => {
                            pending_system.push_str(&m.content);
                            pending_system.push_str("\n\n");
                        }
                        Role::User => {
                            // Gemma's template trims each message.
                            let text = match self {
                                ChatFormat::Gemma => m.content.trim(),
                                _ => m.content.as_str(),
                            };
                            let content = format!("{pending_system}{text}");
                            pending_system.clear();
                            if self == ChatFormat::Gemma {
                                out.push_str(&format!(
                                    "<start_of_turn>user\n{content}<end_of_turn>\n"
                                ));
                            } else {
                                out.push_str(&format!("<s>[INST] {content} [/INST]"));
                            }
                        }
                        Role::Assistant => {
                            if self == ChatFormat::Gemma {
                                out.push_str(&format!(
                                    "<start_of_turn>model\n{}<end_of_turn>\n",
                                    m.content.trim()
                                ));
                            } else {
                                out.push_str(&format!(" {} </s>", m.content));
                            }
                        }
                    }
                }
                if self == ChatFormat::Gemma {
                    out.push_str("<start_of_turn>model\n");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_formats() {
        assert_eq!(
            ChatFormat::detect(Some("{{'<|im_start|>' + role}}"), false),
            ChatFormat::ChatMl
        );
        assert_eq!(
            ChatFormat::detect(Some("<|start_header_id|>"), true),
            ChatFormat::Llama3
        );
        assert_eq!(
            ChatFormat::detect(Some("<start_of_turn>"), false),
            ChatFormat::Gemma
        );
        assert_eq!(
            ChatFormat::detect(Some("'<|im_start|>' ... '<think>\\n\\n</think>'"), false),
            ChatFormat::ChatMlNoThinking
        );
        assert_eq!(ChatFormat::detect(None, true), ChatFormat::ChatMl);
        assert_eq!(ChatFormat::detect(None, false), ChatFormat::Llama2);
    }

    #[test]
    fn renders_chatml_and_gemma() {
        let msgs = [Message::system("S"), Message::user("U")];
        assert_eq!(
            ChatFormat::ChatMl.render(&msgs),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            ChatFormat::Gemma.render(&msgs),
            "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(ChatFormat::Llama2.render(&msgs), "<s>[INST] S\n\nU [/INST]");
        assert!(
            ChatFormat::ChatMlNoThinking
                .render(&msgs)
                .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        );
    }
}
