//! Several workers' Prometheus texts as one: each metric family once (its `# HELP` and
//! `# TYPE` lines from the first text that has it), followed by the samples of every text.
//! The workers label their series with their `pid`, so the samples never collide; a scrape of
//! one worker then reports the whole server ([`crate::worker::Link::gather`]).

use indexmap::IndexMap;

/// One family: its comment lines and its samples.
#[derive(Default)]
struct Family {
    comments: Vec<String>,
    samples: Vec<String>,
}

/// The family a sample line belongs to: its name, less a histogram's or summary's suffix when
/// the family so named was declared.
fn family_of<'a>(sample: &'a str, families: &IndexMap<String, Family>) -> &'a str {
    let name = sample.split(['{', ' ']).next().unwrap_or(sample);
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if families.contains_key(base) {
                return base;
            }
        }
    }
    name
}

/// `texts` merged, families in the order first seen.
pub fn merge<'a>(texts: impl IntoIterator<Item = &'a str>) -> String {
    let mut families: IndexMap<String, Family> = IndexMap::new();
    for text in texts {
        for line in text.lines() {
            if line.trim().is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix("# ") {
                // `# HELP name …` / `# TYPE name …`
                let mut words = comment.splitn(3, ' ');
                let (Some(kind), Some(name)) = (words.next(), words.next()) else {
                    continue;
                };
                let family = families.entry(name.to_string()).or_default();
                let seen = family
                    .comments
                    .iter()
                    .any(|c| c.split(' ').nth(1) == Some(kind));
                if !seen {
                    family.comments.push(line.to_string());
                }
                continue;
            }
            let name = family_of(line, &families).to_string();
            families
                .entry(name)
                .or_default()
                .samples
                .push(line.to_string());
        }
    }
    let mut out = String::new();
    for family in families.values() {
        for line in family.comments.iter().chain(&family.samples) {
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_once_samples_of_all() {
        let a = "# HELP x_total things\n# TYPE x_total counter\nx_total{pid=\"1\"} 3\n\n\
                 # TYPE h histogram\nh_bucket{pid=\"1\",le=\"+Inf\"} 2\nh_sum{pid=\"1\"} 0.5\nh_count{pid=\"1\"} 2\n";
        let b = "# HELP x_total things\n# TYPE x_total counter\nx_total{pid=\"2\"} 4\n\
                 # TYPE h histogram\nh_bucket{pid=\"2\",le=\"+Inf\"} 1\nh_sum{pid=\"2\"} 0.1\nh_count{pid=\"2\"} 1\n\
                 # TYPE only_b gauge\nonly_b{pid=\"2\"} 7\n";
        let merged = merge([a, b]);
        assert_eq!(
            merged,
            "# HELP x_total things\n# TYPE x_total counter\nx_total{pid=\"1\"} 3\nx_total{pid=\"2\"} 4\n\n\
             # TYPE h histogram\nh_bucket{pid=\"1\",le=\"+Inf\"} 2\nh_sum{pid=\"1\"} 0.5\nh_count{pid=\"1\"} 2\n\
             h_bucket{pid=\"2\",le=\"+Inf\"} 1\nh_sum{pid=\"2\"} 0.1\nh_count{pid=\"2\"} 1\n\n\
             # TYPE only_b gauge\nonly_b{pid=\"2\"} 7\n\n"
        );
    }
}
