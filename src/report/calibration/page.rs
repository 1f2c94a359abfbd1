//! The review page: one self-contained HTML file (inline CSS and script, no external resource,
//! works from `file://` offline) on which an annotator reviews a [`CalibrationSample`] and
//! exports `annotations.json`.
//!
//! Everything taken from the dataset is escaped ([`escape`]); ids reach the script only through
//! `data-` attributes, never inside the script's text.

use std::fmt::Write as _;

use super::{CalibrationSample, SampledPair};
use crate::report::{escape, link};

/// Renders Markdown-like post text (what the Stack Overflow import and the reference's
/// `queries.jsonl` hold) as HTML: fenced blocks (three or more backticks, closed by a line of
/// at least as many) as `<pre><code>`, inline code spans (a run of backticks up to the next run
/// of the same length) as `<code>`, paragraphs split on blank lines (line breaks kept by the
/// page's `white-space: pre-wrap`). Every character of the text is escaped: HTML in a post shows
/// as text.
pub fn render_post(text: &str) -> String {
    let mut out = String::new();
    let mut paragraph: Vec<&str> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let ticks = trimmed.bytes().take_while(|&b| b == b'`').count();
        if ticks >= 3 && !trimmed[ticks..].contains('`') {
            flush_paragraph(&mut out, &mut paragraph);
            let language = trimmed[ticks..].trim();
            let mut code = String::new();
            for line in lines.by_ref() {
                let t = line.trim();
                if t.len() >= ticks && t.bytes().all(|b| b == b'`') {
                    break;
                }
                code.push_str(line);
                code.push('\n');
            }
            if language.is_empty() {
                out.push_str("<pre><code>");
            } else {
                let _ = write!(out, "<pre><code class=\"language-{}\">", escape(language));
            }
            out.push_str(&escape(&code));
            out.push_str("</code></pre>\n");
        } else if line.trim().is_empty() {
            flush_paragraph(&mut out, &mut paragraph);
        } else {
            paragraph.push(line);
        }
    }
    flush_paragraph(&mut out, &mut paragraph);
    out
}

fn flush_paragraph(out: &mut String, paragraph: &mut Vec<&str>) {
    if paragraph.is_empty() {
        return;
    }
    out.push_str("<p>");
    out.push_str(&inline_code(&paragraph.join("\n")));
    out.push_str("</p>\n");
    paragraph.clear();
}

/// Escapes `text`, turning code spans into `<code>`.
fn inline_code(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        out.push_str(&escape(&rest[..start]));
        let run = rest[start..].bytes().take_while(|&b| b == b'`').count();
        let after = &rest[start + run..];
        match closing_run(after, run) {
            Some(end) => {
                let code = &after[..end];
                // One space either side is padding (``a`b`` is written `` a`b ``).
                let code = match code.strip_prefix(' ').and_then(|c| c.strip_suffix(' ')) {
                    Some(inner) if !inner.trim().is_empty() => inner,
                    _ => code,
                };
                let _ = write!(out, "<code>{}</code>", escape(code));
                rest = &after[end + run..];
            }
            None => {
                out.push_str(&rest[start..start + run]);
                rest = after;
            }
        }
    }
    out.push_str(&escape(rest));
    out
}

/// Where the next run of exactly `run` backticks starts in `text`.
fn closing_run(text: &str, run: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let len = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            if len == run {
                return Some(i);
            }
            i += len;
        } else {
            i += 1;
        }
    }
    None
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;\
max-width:1000px;padding:0 1em 4em;color:#222}\
header{position:sticky;top:0;background:#fff;border-bottom:1px solid #ccc;padding:0.6em 0;z-index:1}\
header label{margin-right:1em}#progress{font-weight:600;margin-right:1em}#status{color:#555}\
section.question{border:1px solid #ddd;border-radius:6px;padding:0 1em 1em;margin:1.5em 0}\
section.question.done{border-color:#5a5}\
h1{font-size:1.5em}h2{font-size:1.2em}h3{font-size:1em;margin-bottom:0.3em}\
.post p{white-space:pre-wrap}pre{background:#f6f8fa;padding:0.6em;overflow-x:auto;\
white-space:pre-wrap;word-break:break-word}code{background:#f0f0f0;padding:0 0.2em}\
pre code{background:none;padding:0}\
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:0.3em 0.5em;\
text-align:left;vertical-align:top}td.flag,th.flag{text-align:center;width:8em}\
input.missing{width:4em}input.invalid{outline:2px solid #c00}\
.pair{background:#fafafa;border:1px solid #ddd;padding:0.5em 1em;margin-top:0.5em}\
.pair.done{border-color:#5a5}.labels label{margin-right:1.2em}\
.doc pre{max-height:24em;overflow:auto}.meta{color:#555}\
textarea{width:100%;height:12em;font-family:monospace}";

/// The page's script: answers saved in `localStorage` on every change and restored on load,
/// progress counted, and the export (a download of `annotations.json`, also written into
/// `#export-json`).
const SCRIPT: &str = r#"(function () {
  'use strict';
  var KEY = 'freshstack-calibration:' + document.body.getAttribute('data-sample');
  var LABELS = ['relevant', 'partially_relevant', 'non_relevant'];
  function all(selector, root) {
    return Array.prototype.slice.call((root || document).querySelectorAll(selector));
  }
  function byId(id) { return document.getElementById(id); }
  function count(input) {
    var text = input.value.trim();
    return /^[0-9]+$/.test(text) ? parseInt(text, 10) : null;
  }
  function pairLabel(pair) {
    var checked = all('input[type=radio]', pair).filter(function (r) { return r.checked; });
    return checked.length ? checked[0].value : null;
  }
  function save() {
    var state = { annotator: byId('annotator').value, checked: {}, values: {} };
    all('input[type=checkbox], input[type=radio]').forEach(function (input) {
      if (input.checked) { state.checked[input.id] = true; }
    });
    all('input.missing').forEach(function (input) {
      if (input.value !== '') { state.values[input.id] = input.value; }
    });
    try { localStorage.setItem(KEY, JSON.stringify(state)); } catch (e) { /* private mode */ }
  }
  function restore() {
    var state = null;
    try { state = JSON.parse(localStorage.getItem(KEY) || 'null'); } catch (e) { state = null; }
    if (!state) { return; }
    byId('annotator').value = state.annotator || '';
    Object.keys(state.checked || {}).forEach(function (id) {
      var input = byId(id);
      if (input) { input.checked = true; }
    });
    Object.keys(state.values || {}).forEach(function (id) {
      var input = byId(id);
      if (input) { input.value = state.values[id]; }
    });
  }
  function update() {
    var questions = all('section.question');
    var pairs = all('div.pair');
    var doneQuestions = 0;
    var donePairs = 0;
    questions.forEach(function (section) {
      var input = section.querySelector('input.missing');
      var ok = count(input) !== null;
      input.classList.toggle('invalid', input.value.trim() !== '' && !ok);
      section.classList.toggle('done', ok);
      if (ok) { doneQuestions += 1; }
    });
    pairs.forEach(function (pair) {
      var ok = pairLabel(pair) !== null;
      pair.classList.toggle('done', ok);
      if (ok) { donePairs += 1; }
    });
    byId('progress').textContent = doneQuestions + ' of ' + questions.length +
      ' questions, ' + donePairs + ' of ' + pairs.length + ' pairs done';
  }
  function annotations() {
    var questions = [];
    all('section.question').forEach(function (section) {
      var missing = count(section.querySelector('input.missing'));
      if (missing === null) { return; }
      questions.push({
        query_id: section.getAttribute('data-qid'),
        missing_nuggets: missing,
        nuggets: all('tr.nugget', section).map(function (row) {
          return {
            nugget_id: row.getAttribute('data-nid'),
            hallucinated: row.querySelector('input.flag-a').checked,
            minor_or_redundant: row.querySelector('input.flag-b').checked
          };
        })
      });
    });
    var pairs = [];
    all('div.pair').forEach(function (pair) {
      var label = pairLabel(pair);
      if (label === null || LABELS.indexOf(label) < 0) { return; }
      pairs.push({
        query_id: pair.getAttribute('data-qid'),
        nugget_id: pair.getAttribute('data-nid'),
        doc_id: pair.getAttribute('data-doc'),
        label: label
      });
    });
    return { annotator: byId('annotator').value.trim(), questions: questions, pairs: pairs };
  }
  function exportAnnotations() {
    var status = byId('status');
    var data = annotations();
    if (!data.annotator) {
      status.textContent = 'Enter your name before exporting.';
      byId('annotator').focus();
      return;
    }
    var json = JSON.stringify(data, null, 2) + '\n';
    var out = byId('export-json');
    out.textContent = json;
    out.value = json;
    var left = all('section.question').length - data.questions.length +
      all('div.pair').length - data.pairs.length;
    status.textContent = 'Exported ' + data.questions.length + ' questions and ' +
      data.pairs.length + ' pairs as annotations.json' +
      (left ? ' (' + left + ' items not done yet are left out)' : '') + '.';
    var link = document.createElement('a');
    link.href = URL.createObjectURL(new Blob([json], { type: 'application/json' }));
    link.download = 'annotations.json';
    document.body.appendChild(link);
    link.click();
    document.body.removeChild(link);
    setTimeout(function () { URL.revokeObjectURL(link.href); }, 10000);
  }
  restore();
  update();
  document.addEventListener('input', function () { update(); save(); });
  document.addEventListener('change', function () { update(); save(); });
  byId('export').addEventListener('click', exportAnnotations);
}());"#;

/// Renders the review page of `sample`.
pub fn render_review(sample: &CalibrationSample) -> String {
    let mut h = String::with_capacity(64 * 1024);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    h.push_str("<title>FreshStack calibration review</title>\n");
    let _ = writeln!(h, "<style>{STYLE}</style>\n</head>");
    let _ = writeln!(h, "<body data-sample=\"{}\">", escape(&sample.key()));
    h.push_str(
        "<header>\n<label>Annotator <input type=\"text\" id=\"annotator\" \
         autocomplete=\"name\"/></label>\n<span id=\"progress\"></span>\n\
         <button type=\"button\" id=\"export\">Export annotations.json</button>\n\
         <span id=\"status\"></span>\n</header>\n",
    );
    h.push_str("<h1>FreshStack calibration review</h1>\n");
    let _ = writeln!(
        h,
        "<p class=\"meta\">{} questions sampled of {} with nuggets (seed {}), {} (nugget, \
         document) pairs. Your answers are kept in this browser until you export them.</p>",
        sample.questions.len(),
        sample.questions_eligible,
        sample.seed,
        sample.pairs.len()
    );
    h.push_str(
        "<p class=\"meta\">Per question: read the question and its accepted answer; tick A when \
         a nugget says something the answer does not (hallucinated), B when it is minor or \
         repeats another nugget; then enter C, how many nuggets are missing to cover the \
         answer's key ideas (0 when none). Per pair: does the document support the nugget? A \
         question counts as done once C is entered.</p>\n",
    );
    for (qi, q) in sample.questions.iter().enumerate() {
        let _ = writeln!(
            h,
            "<section class=\"question\" id=\"q{qi}\" data-qid=\"{}\">",
            escape(&q.query_id)
        );
        let _ = write!(
            h,
            "<h2>{}. {}</h2>\n<p class=\"meta\">Question {}",
            qi + 1,
            escape(&q.query_title),
            escape(&q.query_id)
        );
        if let Some(url) = &q.url {
            let _ = write!(h, " · {}", link(url, url));
        }
        h.push_str("</p>\n");
        let _ = writeln!(
            h,
            "<div class=\"post\">\n{}</div>\n<h3>Accepted answer</h3>\n<div class=\"post answer\">\n{}</div>",
            render_post(&q.query_text),
            render_post(&q.answer_text)
        );
        h.push_str(
            "<h3>Nuggets</h3>\n<table class=\"nuggets\">\n<thead><tr><th>#</th><th>Nugget</th>\
             <th class=\"flag\">A: hallucinated (not in the answer)</th>\
             <th class=\"flag\">B: minor or redundant</th></tr></thead>\n<tbody>\n",
        );
        for (ni, n) in q.nuggets.iter().enumerate() {
            let _ = writeln!(
                h,
                "<tr class=\"nugget\" data-nid=\"{nid}\"><td>{}</td><td>{}</td>\
                 <td class=\"flag\"><input type=\"checkbox\" class=\"flag-a\" id=\"a{qi}-{ni}\" \
                 aria-label=\"A: hallucinated\"/></td>\
                 <td class=\"flag\"><input type=\"checkbox\" class=\"flag-b\" id=\"b{qi}-{ni}\" \
                 aria-label=\"B: minor or redundant\"/></td></tr>",
                ni + 1,
                escape(&n.text),
                nid = escape(&n.nugget_id),
            );
        }
        h.push_str("</tbody>\n</table>\n");
        let _ = writeln!(
            h,
            "<p><label>C: nuggets missing to cover the answer <input type=\"number\" \
             class=\"missing\" id=\"c{qi}\" min=\"0\" step=\"1\"/></label></p>"
        );
        for (pi, pair) in sample
            .pairs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.query_id == q.query_id)
        {
            pair_block(&mut h, pi, pair);
        }
        h.push_str("</section>\n");
    }
    h.push_str(
        "<h2>Export</h2>\n<p class=\"meta\">The button at the top downloads annotations.json; \
         its text also appears here.</p>\n<textarea id=\"export-json\" readonly=\"readonly\">\
         </textarea>\n",
    );
    let _ = writeln!(h, "<script>\n{SCRIPT}\n</script>\n</body>\n</html>");
    h
}

fn pair_block(h: &mut String, pi: usize, pair: &SampledPair) {
    let _ = writeln!(
        h,
        "<div class=\"pair\" id=\"p{pi}\" data-qid=\"{}\" data-nid=\"{}\" data-doc=\"{}\">",
        escape(&pair.query_id),
        escape(&pair.nugget_id),
        escape(&pair.doc_id)
    );
    let _ = writeln!(
        h,
        "<h3>Judgment: does the document support the nugget?</h3>\n<p><b>Nugget:</b> {}</p>",
        escape(&pair.nugget_text)
    );
    let location = match (&pair.repo, &pair.path) {
        (Some(repo), Some(path)) => format!("{repo}/{path}"),
        _ => pair.doc_id.clone(),
    };
    h.push_str("<div class=\"doc\"><p><b>Document:</b> ");
    match &pair.url {
        Some(url) => {
            h.push_str(&link(url, &location));
        }
        None => h.push_str(&escape(&location)),
    }
    if location != pair.doc_id {
        let _ = write!(h, " <span class=\"meta\">({})</span>", escape(&pair.doc_id));
    }
    let _ = writeln!(
        h,
        "</p>\n<pre><code>{}</code></pre></div>",
        escape(&pair.text)
    );
    h.push_str("<p class=\"labels\">");
    for (value, title) in [
        ("relevant", "relevant"),
        ("partially_relevant", "partially relevant"),
        ("non_relevant", "non-relevant"),
    ] {
        let _ = write!(
            h,
            "<label><input type=\"radio\" name=\"label-p{pi}\" id=\"p{pi}-{value}\" \
             value=\"{value}\"/> {title}</label>"
        );
    }
    h.push_str("</p>\n</div>\n");
}
