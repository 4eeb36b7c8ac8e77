//! PostgreSQL positional parameters (`$1`, `$2`, ...) replaced by literals, for the one
//! statement that cannot take bound parameters: `COPY (query) TO STDOUT` ([`super::pg_copy`]).
//!
//! The exception to "parameters are bound, never formatted into the text" is narrow: the
//! literals are the exporter's own typed values (an instant it formats, an `i64`), never
//! text from a user or a database, and each replaces exactly one `$n` token that the
//! server's lexer would read as a parameter. String constants (`'...'`, `E'...'`), quoted
//! identifiers, dollar-quoted bodies and comments are copied as they are, so a `$1` inside
//! them is left alone, as PostgreSQL leaves it.

/// `sql` with each parameter `$n` replaced by `values[n - 1]`.
///
/// `Err` names what the lexer could not read: an unterminated constant or comment, or a
/// parameter without a value (the statement was prepared with as many as `values`, so
/// either is a broken invariant, not bad input).
pub(super) fn inline_pg_parameters(sql: &str, values: &[String]) -> Result<String, String> {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + values.iter().map(String::len).sum::<usize>());
    let mut copied = 0; // bytes of `sql` before this index are in `out` (or replaced)
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        i = match bytes[i] {
            b'\'' => {
                let escapes = is_escape_string_prefix(bytes, i);
                end_of_quoted(bytes, i, b'\'', escapes).ok_or("an unterminated string constant")?
            }
            b'"' => end_of_quoted(bytes, i, b'"', false).ok_or("an unterminated quoted name")?,
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                bytes[i..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |n| i + n + 1)
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                end_of_block_comment(bytes, i).ok_or("an unterminated /* comment")?
            }
            b'$' if !follows_identifier(bytes, i) => {
                let digits = bytes[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
                if digits > 0 {
                    let end = i + 1 + digits;
                    let n: usize = sql[i + 1..end].parse().map_err(|_| "a parameter number")?;
                    let value = n
                        .checked_sub(1)
                        .and_then(|k| values.get(k))
                        .ok_or_else(|| format!("parameter ${n} has no value"))?;
                    out.push_str(&sql[copied..start]);
                    out.push_str(value);
                    copied = end;
                    end
                } else if let Some(tag_end) = dollar_tag_end(bytes, i) {
                    let tag = &bytes[i..tag_end];
                    find(bytes, tag_end, tag)
                        .map(|close| close + tag.len())
                        .ok_or("an unterminated dollar-quoted string")?
                } else {
                    i + 1
                }
            }
            _ => i + 1,
        };
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

/// Identifier characters: a `$` right after one belongs to the identifier (`a$1`).
fn is_identifier_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

fn follows_identifier(bytes: &[u8], i: usize) -> bool {
    i > 0 && is_identifier_byte(bytes[i - 1])
}

/// `E'...'` (or `e'...'`) reads backslash escapes; `xE'` is an identifier then a string.
fn is_escape_string_prefix(bytes: &[u8], quote: usize) -> bool {
    quote > 0 && matches!(bytes[quote - 1], b'E' | b'e') && !follows_identifier(bytes, quote - 1)
}

/// The index after the closing `quote` of the constant opening at `open`; a doubled quote
/// is part of the constant, and with `escapes` so is a backslash-escaped character.
fn end_of_quoted(bytes: &[u8], open: usize, quote: u8, escapes: bool) -> Option<usize> {
    let mut i = open + 1;
    while i < bytes.len() {
        let b = bytes[i];
        if escapes && b == b'\\' {
            i += 2;
        } else if b == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return Some(i + 1);
            }
        } else {
            i += 1;
        }
    }
    None
}

/// Block comments nest in PostgreSQL.
fn end_of_block_comment(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// `$tag$` or `$$` opening at `i`: the index after its second `$`.
fn dollar_tag_end(bytes: &[u8], i: usize) -> Option<usize> {
    let name = bytes[i + 1..].iter().take_while(|&&b| is_identifier_byte(b) && b != b'$').count();
    let first_is_digit = name > 0 && bytes[i + 1].is_ascii_digit();
    (bytes.get(i + 1 + name) == Some(&b'$') && !first_is_digit).then_some(i + name + 2)
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes[from..].windows(needle.len()).position(|w| w == needle).map(|p| from + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Vec<String> {
        ["A", "B", "C", "D"].iter().map(|s| format!("<{s}>")).collect()
    }

    #[test]
    fn parameters_are_replaced_and_constants_comments_and_names_are_not() {
        let sql = "SELECT '$1', \"$2\", E'\\'$1', $x$ $1 $x$, a$1 -- $2\n \
                   /* $1 /* $2 */ $3 */ FROM t WHERE a > $1 AND b <= $2 AND k BETWEEN $3 AND $4";
        let expected = "SELECT '$1', \"$2\", E'\\'$1', $x$ $1 $x$, a$1 -- $2\n \
                   /* $1 /* $2 */ $3 */ FROM t WHERE a > <A> AND b <= <B> AND k BETWEEN <C> AND <D>";
        assert_eq!(inline_pg_parameters(sql, &values()).unwrap(), expected);
    }

    #[test]
    fn doubled_quotes_stay_inside_their_constant() {
        let sql = "SELECT 'it''s $1', \"a\"\"$2\" FROM t WHERE x=$2";
        assert_eq!(
            inline_pg_parameters(sql, &values()).unwrap(),
            "SELECT 'it''s $1', \"a\"\"$2\" FROM t WHERE x=<B>"
        );
    }

    #[test]
    fn a_plain_string_ends_at_its_quote_even_after_a_backslash() {
        // standard_conforming_strings: '\' is a one-character constant.
        let sql = "SELECT '\\' , $1";
        assert_eq!(inline_pg_parameters(sql, &values()).unwrap(), "SELECT '\\' , <A>");
    }

    #[test]
    fn what_cannot_be_read_is_an_error() {
        assert!(inline_pg_parameters("SELECT 'x", &values()).is_err());
        assert!(inline_pg_parameters("SELECT 1 /* x", &values()).is_err());
        assert!(inline_pg_parameters("SELECT $q$ x", &values()).is_err());
        let missing = inline_pg_parameters("SELECT $5", &values()).unwrap_err();
        assert_eq!(missing, "parameter $5 has no value");
        assert!(inline_pg_parameters("SELECT $0", &values()).is_err());
    }

    #[test]
    fn a_lone_dollar_and_text_without_parameters_pass_through() {
        assert_eq!(inline_pg_parameters("SELECT '€', $", &[]).unwrap(), "SELECT '€', $");
        assert_eq!(inline_pg_parameters("", &[]).unwrap(), "");
    }
}
