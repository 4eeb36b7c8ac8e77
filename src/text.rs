//! Plain-text output shared by the commands that print tables: aligned columns for the
//! terminal and CSV rows. Both return strings; the binary decides where they go.

use std::borrow::Cow;

/// `header` and `rows` as aligned columns: each column as wide as its widest cell, cells
/// two spaces apart, trailing spaces trimmed, one line per row (`\n` ended). Columns for
/// which `right_aligned(index)` holds are padded on the left, the others on the right.
pub fn text_table<S: AsRef<str>>(
    header: &[&str],
    rows: &[Vec<S>],
    right_aligned: impl Fn(usize) -> bool,
) -> String {
    let lines: Vec<Vec<&str>> = std::iter::once(header.to_vec())
        .chain(rows.iter().map(|row| row.iter().map(AsRef::as_ref).collect()))
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            lines.iter().map(|line| line.get(c).map_or(0, |cell| cell.len())).max().unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, width))| {
                if right_aligned(c) {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// One CSV record, `\n` ended: fields joined by commas, a field holding a comma, a quote
/// or a line break quoted with its quotes doubled (RFC 4180).
pub fn csv_row<S: AsRef<str>>(fields: &[S]) -> String {
    let mut out = fields.iter().map(|f| csv_field(f.as_ref())).collect::<Vec<_>>().join(",");
    out.push('\n');
    out
}

fn csv_field(field: &str) -> Cow<'_, str> {
    if field.contains([',', '"', '\n', '\r']) {
        Cow::Owned(format!("\"{}\"", field.replace('"', "\"\"")))
    } else {
        Cow::Borrowed(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_trailing_space_goes() {
        let rows = vec![vec!["skip", "12", ""], vec!["pending-review:5s", "3", "x"]];
        let table = text_table(&["policy", "n", "note"], &rows, |c| c == 1);
        assert_eq!(
            table,
            "policy              n  note\n\
             skip               12\n\
             pending-review:5s   3  x\n"
        );
    }

    #[test]
    fn csv_quotes_only_what_needs_it() {
        assert_eq!(csv_row(&["a", "b c", "1.5"]), "a,b c,1.5\n");
        assert_eq!(
            csv_row(&["x,y", "say \"hi\"", "two\nlines"]),
            "\"x,y\",\"say \"\"hi\"\"\",\"two\nlines\"\n"
        );
        assert_eq!(csv_row::<&str>(&[]), "\n");
    }
}
