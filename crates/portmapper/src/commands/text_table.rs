//! Plain-text tables for the CLI's human output (`render`, `status`).

/// Left-aligned columns separated by `gap` spaces; widths count characters (the status marks
/// are one character wide), trailing spaces are trimmed.
pub fn columns(rows: &[Vec<String>], gap: usize) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or_default();
    let widths: Vec<usize> = (0..width)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or_default()
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', pad + gap));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align_by_characters_and_trim_line_ends() {
        let rows = vec![
            vec!["pod".to_owned(), "http".to_owned()],
            vec!["pod-a".to_owned(), "✔".to_owned()],
        ];
        assert_eq!(super::columns(&rows, 2), "pod    http\npod-a  ✔\n");
        assert_eq!(super::columns(&rows, 3), "pod     http\npod-a   ✔\n");
    }
}
