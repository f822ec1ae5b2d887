//! The shipped workloads reproduce the statistics their papers report, generation is
//! deterministic, and bad workload files are reported with file, line and field.
//!
//! Tolerances are stated beside each check; sample sizes are large enough that a correct
//! generator stays well inside them (the measured values are in docs/workloads.md). Run
//! with `--nocapture` to see the measured values.

use std::collections::HashSet;

use gearbox_workload::{
    generate_page, Cdf, Limit, ObjectKind, Page, Request, WorkloadError, WorkloadSpec, DEFAULT_MSS_BYTES,
};

fn builtin(name: &str) -> WorkloadSpec {
    WorkloadSpec::builtin(name).unwrap_or_else(|error| panic!("built-in `{name}` must load: {error}"))
}

fn fraction(items: &[f64], predicate: impl Fn(f64) -> bool) -> f64 {
    items.iter().filter(|&&x| predicate(x)).count() as f64 / items.len() as f64
}

fn assert_near(what: &str, measured: f64, target: f64, tolerance: f64) {
    println!("{what}: measured {measured:.4}, target {target} +- {tolerance}");
    assert!(
        (measured - target).abs() <= tolerance,
        "{what}: measured {measured}, expected {target} +- {tolerance}"
    );
}

/// Share of all bytes carried by the largest `top` fraction of sizes.
fn top_share(sizes: &[f64], top: f64) -> f64 {
    let mut sorted = sizes.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let count = (sorted.len() as f64 * top).round() as usize;
    sorted[..count].iter().sum::<f64>() / sorted.iter().sum::<f64>()
}

/// Gaps between consecutive sends inside each click, and between clicks.
fn gaps(requests: &[Request]) -> (Vec<f64>, Vec<f64>) {
    let mut within = Vec::new();
    let mut between = Vec::new();
    for pair in requests.windows(2) {
        let gap = pair[1].send_at_ms - pair[0].send_at_ms;
        if pair[1].click == pair[0].click {
            within.push(gap);
        } else {
            between.push(gap);
        }
    }
    (within, between)
}

#[test]
fn app_matches_floo_fig5_sizes_gaps_and_clicks() {
    let app = builtin("app");
    let requests = app.generate(1, Limit::Requests(200_000));
    assert_eq!(requests.len(), 200_000);
    let request_bytes: Vec<f64> = requests.iter().map(|r| r.request_bytes as f64).collect();
    let response_bytes: Vec<f64> = requests.iter().map(|r| r.response_bytes as f64).collect();
    assert_near(
        "app P(request < 10 KB)",
        fraction(&request_bytes, |b| b < 10_000.0),
        0.80,
        0.03,
    );
    assert_near(
        "app P(response < 10 KB)",
        fraction(&response_bytes, |b| b < 10_000.0),
        0.70,
        0.03,
    );
    assert_near(
        "app share of bytes in largest 3.4% of responses",
        top_share(&response_bytes, 0.034),
        0.60,
        0.05,
    );

    let (within, between) = gaps(&requests);
    assert_near(
        "app P(gap < 44 ms) within clicks",
        fraction(&within, |g| g < 44.0),
        0.80,
        0.03,
    );
    assert_near(
        "app P(gap = 0) within clicks",
        fraction(&within, |g| g == 0.0),
        0.384,
        0.02,
    );
    assert!(
        within.iter().all(|&g| g <= 1000.0),
        "gaps inside a click are at most 1 s"
    );
    assert!(
        between.iter().all(|&g| g > 1000.0),
        "clicks are separated by more than 1 s (Floo §4.2)"
    );

    let new_connections = requests.iter().filter(|r| r.new_connection).count();
    assert_eq!(new_connections, 1, "the app uses one persistent connection");
    assert!(requests[0].new_connection);
}

#[test]
fn feed_clicks_fire_13_5_concurrent_requests_under_50_kb() {
    let feed = builtin("feed");
    let requests = feed.generate(2, Limit::Requests(100_000));
    let clicks = requests.last().map(|r| r.click as usize + 1).unwrap_or(0);
    // The last click may be cut by the limit; count only complete ones.
    let complete: Vec<&Request> = requests.iter().filter(|r| (r.click as usize) < clicks - 1).collect();
    let mean_per_click = complete.len() as f64 / (clicks - 1) as f64;
    assert_near("feed mean requests per click", mean_per_click, 13.5, 0.5);
    assert!(
        requests.iter().all(|r| r.response_bytes < 50_000),
        "every feed response is under 50 KB"
    );
    let (within, between) = gaps(&requests);
    assert!(within.iter().all(|&g| g == 0.0), "requests of a click are concurrent");
    assert!(between.iter().all(|&g| g >= 2000.0), "think time is at least 2 s");
    let mean_response = requests.iter().map(|r| r.response_bytes as f64).sum::<f64>() / requests.len() as f64;
    println!("feed mean response bytes: {mean_response:.0}");
    assert!(
        (10_000.0..50_000.0).contains(&mean_response),
        "responses are tens of kilobytes"
    );
}

#[test]
fn search_needs_more_than_10_mss_for_89_percent_and_spreads_over_many_prefixes() {
    let search = builtin("search");
    let requests = search.generate(3, Limit::Requests(100_000));
    let sizes: Vec<f64> = requests.iter().map(|r| r.response_bytes as f64).collect();
    let ten_segments = 10.0 * DEFAULT_MSS_BYTES as f64;
    assert_near(
        "search P(response > 10 MSS)",
        fraction(&sizes, |b| b > ten_segments),
        0.89,
        0.02,
    );
    assert!(
        requests.iter().all(|r| r.new_connection),
        "every search response comes on a new connection"
    );
    let clicks: HashSet<u32> = requests.iter().map(|r| r.click).collect();
    assert_eq!(clicks.len(), requests.len(), "one request per click");

    let prefixes: HashSet<u32> = requests.iter().map(|r| r.client_index >> 8).collect();
    println!(
        "search distinct /24 prefixes in {} requests: {}",
        requests.len(),
        prefixes.len()
    );
    assert!(prefixes.len() > 5_000, "requests come from many /24 prefixes");
    let from_learned = requests.iter().filter(|r| (r.client_index >> 8) < 3928).count() as f64 / requests.len() as f64;
    assert_near(
        "search share of flows from the 3928 busiest prefixes",
        from_learned,
        0.812,
        0.01,
    );
    assert!(requests.iter().all(|r| (r.client_index & 0xff) < 254));

    let (_, between) = gaps(&requests);
    let mean_gap = between.iter().sum::<f64>() / between.len() as f64;
    assert_near("search mean gap between requests (ms)", mean_gap, 600.0, 30.0);
}

#[test]
fn bulk_is_one_transfer_of_the_configured_size() {
    let requests = builtin("bulk").generate(4, Limit::DurationMs(1e9));
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].response_bytes, 50_000_000);
    assert!(requests[0].new_connection);
    assert_eq!(requests[0].path, "/bytes/50000000");
    let small = WorkloadSpec::bulk(123_456);
    small.validate().unwrap();
    let requests = small.generate(4, Limit::Requests(10));
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].response_bytes, 123_456);
}

#[test]
fn pages_match_flexhttp_table1_and_span_sailfish_sites() {
    let pages: Vec<Page> = (0..4000u64).map(|seed| generate_page(seed).unwrap()).collect();
    let count = pages.len() as f64;
    let files: Vec<usize> = pages.iter().map(|p| p.objects.len()).collect();
    let mean_files = files.iter().sum::<usize>() as f64 / count;
    let mean_bytes = pages.iter().map(|p| p.total_bytes() as f64).sum::<f64>() / count;
    assert_near("page mean files", mean_files, 36.06, 36.06 * 0.05);
    assert_near("page mean bytes (MB)", mean_bytes / 1e6, 1.08, 1.08 * 0.07);
    let std_files = (files.iter().map(|&f| (f as f64 - mean_files).powi(2)).sum::<f64>() / count).sqrt();
    assert_near("page std of files per page", std_files, 25.0, 25.0 * 0.15);
    let std_mb = (pages
        .iter()
        .map(|p| (p.total_bytes() as f64 - mean_bytes).powi(2))
        .sum::<f64>()
        / count)
        .sqrt()
        / 1e6;
    // Table 1 reports 0.56 MB; not a target of the generator (see docs/workloads.md).
    println!("page std of page bytes: {std_mb:.3} MB (Table 1: 0.56 MB)");
    let min = files.iter().min().copied().unwrap_or(0);
    let max = files.iter().max().copied().unwrap_or(0);
    println!("page files per page: min {min}, max {max}");
    assert!(
        min <= 6 && max >= 47,
        "file counts cover SAILfish Table 5.1's 6 to 47 (got {min}..{max})"
    );
    assert!(max <= 255, "no page beyond Table 1's maximum of 255 files");

    for (kind, mean_count, mean_mb) in [
        (ObjectKind::Css, 2.28, 0.04),
        (ObjectKind::Js, 5.66, 0.18),
        (ObjectKind::Image, 24.58, 0.72),
    ] {
        let measured_count = pages.iter().map(|p| p.count(kind) as f64).sum::<f64>() / count;
        let measured_mb = pages
            .iter()
            .flat_map(|p| p.objects.iter().filter(move |o| o.kind == kind))
            .map(|o| o.size_bytes as f64)
            .sum::<f64>()
            / count
            / 1e6;
        assert_near(
            &format!("page mean {kind:?} files"),
            measured_count,
            mean_count,
            mean_count * 0.1,
        );
        assert_near(&format!("page mean {kind:?} MB"), measured_mb, mean_mb, mean_mb * 0.1);
    }
}

#[test]
fn pages_are_loadable_graphs_rooted_at_html_with_browser_priorities() {
    let mut images_from_css = 0;
    let mut fonts_from_css = 0;
    for seed in 0..500u64 {
        let page = generate_page(seed).unwrap();
        page.validate().unwrap_or_else(|error| panic!("page {seed}: {error}"));
        let order = page.topological_order().unwrap();
        assert_eq!(order[0], 0);
        let position: Vec<usize> = {
            let mut position = vec![0; order.len()];
            for (index, &id) in order.iter().enumerate() {
                position[id] = index;
            }
            position
        };
        for object in &page.objects {
            for &dependency in &object.depends_on {
                assert!(
                    position[dependency] < position[object.id],
                    "dependency comes first in the order"
                );
                let parent = page.objects[dependency].kind;
                if parent == ObjectKind::Css && object.kind == ObjectKind::Image {
                    images_from_css += 1;
                }
                if parent == ObjectKind::Css && object.kind == ObjectKind::Font {
                    fonts_from_css += 1;
                }
                if object.kind == ObjectKind::Css {
                    assert!(
                        matches!(parent, ObjectKind::Html | ObjectKind::Css),
                        "CSS is found in HTML or CSS"
                    );
                }
            }
            assert!(object.path.starts_with(&format!("/bytes/{}?", object.size_bytes)));
        }
        assert_eq!(page.objects[0].kind, ObjectKind::Html);
        let urgency = |kind| page.objects.iter().find(|o| o.kind == kind).map(|o| o.priority);
        assert_eq!(urgency(ObjectKind::Html), Some(0));
        for kind in [ObjectKind::Css, ObjectKind::Js] {
            if let (Some(parent), Some(image)) = (urgency(kind), urgency(ObjectKind::Image)) {
                assert!(parent < image, "{kind:?} is more urgent than images");
            }
        }
    }
    assert!(images_from_css > 0, "some images are discovered from stylesheets");
    assert!(fonts_from_css > 0, "fonts are discovered from stylesheets");
}

#[test]
fn page_workload_emits_whole_pages_as_clicks_in_dependency_order() {
    let spec = builtin("page");
    let requests = spec.generate(5, Limit::DurationMs(300_000.0));
    assert!(!requests.is_empty());
    let clicks = requests.iter().map(|r| r.click).max().unwrap_or(0);
    assert!(clicks >= 5, "several page loads in five minutes");
    for click in 0..clicks {
        let page: Vec<&Request> = requests.iter().filter(|r| r.click == click).collect();
        assert!(page[0].new_connection && page[1..].iter().all(|r| !r.new_connection));
        assert!(page[0].path.contains(".html"), "the HTML is requested first");
        assert!(page.iter().all(|r| r.send_at_ms == page[0].send_at_ms));
    }
    assert!(matches!(
        builtin("app").generate_page(1),
        Err(WorkloadError::NotAPage { .. })
    ));
}

#[test]
fn the_same_seed_gives_the_same_requests_and_another_seed_does_not() {
    for name in WorkloadSpec::builtin_names() {
        let spec = builtin(name);
        let first = spec.generate(7, Limit::Requests(2_000));
        let again = spec.generate(7, Limit::Requests(2_000));
        assert_eq!(first, again, "{name}: same seed, same requests");
        if name != "bulk" {
            let other = spec.generate(8, Limit::Requests(2_000));
            assert_ne!(first, other, "{name}: another seed, other requests");
        }
    }
    assert_eq!(generate_page(11).unwrap(), generate_page(11).unwrap());
    assert_ne!(generate_page(11).unwrap(), generate_page(12).unwrap());
}

#[test]
fn duration_limit_keeps_requests_sent_before_it_in_order() {
    let requests = builtin("app").generate(9, Limit::DurationMs(120_000.0));
    assert!(!requests.is_empty());
    assert!(requests.iter().all(|r| r.send_at_ms < 120_000.0));
    assert!(requests
        .windows(2)
        .all(|w| w[0].send_at_ms <= w[1].send_at_ms && w[0].click <= w[1].click));
    let longer = builtin("app").generate(9, Limit::DurationMs(240_000.0));
    assert!(longer.len() > requests.len());
    assert_eq!(
        &longer[..requests.len()],
        &requests[..],
        "a longer run extends a shorter one"
    );
}

/// The built-in `app` text with one line replaced.
fn app_with(old: &str, new: &str) -> String {
    let text = WorkloadSpec::builtin_text("app").unwrap();
    assert!(text.contains(old), "test setup: `{old}` is in app.toml");
    text.replacen(old, new, 1)
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|line| line.contains(needle))
        .map(|index| index + 1)
        .unwrap()
}

fn invalid(result: Result<WorkloadSpec, WorkloadError>) -> (String, usize, String, String) {
    match result {
        Err(error @ WorkloadError::Invalid { .. }) => {
            let shown = error.to_string();
            let WorkloadError::Invalid {
                source_name,
                line,
                field,
                ..
            } = error
            else {
                unreachable!()
            };
            assert!(
                shown.contains(&source_name) && shown.contains(&field),
                "message names file and field: {shown}"
            );
            println!("{shown}");
            (source_name, line, field, shown)
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }
}

#[test]
fn a_value_of_the_wrong_type_is_reported_with_file_line_and_field() {
    let text = app_with("gap_ms = [[0, 0.384]", "gap_ms = \"fast\"\n#[[0, 0.384]");
    let (source, line, field, shown) = invalid(WorkloadSpec::from_toml_str(&text, "my-app.toml"));
    assert_eq!(source, "my-app.toml");
    assert_eq!(line, line_of(&text, "gap_ms = \"fast\""));
    assert_eq!(field, "clicks.gap_ms");
    assert!(shown.contains(&format!("line {line}")));
}

#[test]
fn an_unknown_field_is_rejected_by_name() {
    let text = app_with("[clicks]\n", "[clicks]\nburst_size = 3\n");
    let (_, line, field, shown) = invalid(WorkloadSpec::from_toml_str(&text, "app.toml"));
    assert_eq!(line, line_of(&text, "burst_size"));
    assert_eq!(field, "clicks.burst_size");
    assert!(shown.contains("unknown field"));
    let top = format!("colour = \"red\"\n{}", WorkloadSpec::builtin_text("bulk").unwrap());
    let (_, line, field, _) = invalid(WorkloadSpec::from_toml_str(&top, "bulk.toml"));
    assert_eq!((line, field.as_str()), (1, "colour"));
}

#[test]
fn a_cdf_that_goes_backwards_names_its_field_and_line() {
    let text = app_with("[4000, 0.50]", "[4000, 0.20]");
    let (_, line, field, shown) = invalid(WorkloadSpec::from_toml_str(&text, "app.toml"));
    assert_eq!(field, "clicks.response_bytes");
    assert_eq!(line, line_of(&text, "response_bytes = ["));
    assert!(shown.contains("non-decreasing"), "{shown}");
    let text = app_with("[100000, 1.0]]", "[100000, 0.99]]");
    let (_, _, field, shown) = invalid(WorkloadSpec::from_toml_str(&text, "app.toml"));
    assert_eq!(field, "clicks.request_bytes");
    assert!(shown.contains("must be 1"), "{shown}");
}

#[test]
fn broken_toml_syntax_and_missing_fields_are_located() {
    let text = app_with("[clicks]", "[clicks");
    let (_, line, _, _) = invalid(WorkloadSpec::from_toml_str(&text, "app.toml"));
    assert_eq!(line, line_of(&text, "[clicks"));
    let text = app_with("think_time_ms = [[1001", "#think_time_ms = [[1001");
    let (_, _, field, shown) = invalid(WorkloadSpec::from_toml_str(&text, "app.toml"));
    assert_eq!(field, "clicks.think_time_ms");
    assert!(shown.contains("missing field"));
}

#[test]
fn cross_field_mistakes_are_located_in_the_file() {
    let text = app_with("[clicks]\n", "[clicks]\nresponse_mss = [[10, 1.0]]\n");
    let (_, line, field, _) = invalid(WorkloadSpec::from_toml_str(&text, "app.toml"));
    assert_eq!(field, "clicks.response_mss");
    assert_eq!(line, line_of(&text, "response_mss"));
    let both = format!(
        "{}\n[bulk]\nsize_bytes = 5\n",
        WorkloadSpec::builtin_text("app").unwrap()
    );
    let (_, line, field, _) = invalid(WorkloadSpec::from_toml_str(&both, "both.toml"));
    assert_eq!(field, "bulk");
    assert_eq!(line, line_of(&both, "[bulk]"));
    let page = WorkloadSpec::builtin_text("page")
        .unwrap()
        .replacen("urgency = 5", "urgency = 9", 1);
    let (_, line, field, _) = invalid(WorkloadSpec::from_toml_str(&page, "page.toml"));
    assert_eq!(field, "page.image.urgency");
    assert_eq!(line, line_of(&page, "urgency = 9"));
}

#[test]
fn an_unknown_workload_name_lists_the_builtin_ones() {
    let error = WorkloadSpec::builtin("videos").unwrap_err();
    let shown = error.to_string();
    for name in ["feed", "app", "search", "bulk", "page"] {
        assert!(shown.contains(name), "{shown}");
    }
    assert!(matches!(
        WorkloadSpec::load("videos"),
        Err(WorkloadError::UnknownWorkload { .. })
    ));
    assert!(WorkloadSpec::load("app").is_ok());
}

#[test]
fn a_user_file_is_read_by_path_and_a_missing_file_is_named() {
    let dir = std::env::temp_dir().join(format!("gearbox-workload-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mine.toml");
    let text = "name = \"mine\"\n[clicks]\nthink_time_ms = [[1500, 1.0]]\nrequests_per_click = [[2, 1.0]]\n\
                request_bytes = [[100, 1.0]]\nresponse_bytes = [[1000, 0.0], [2000, 1.0]]\n";
    std::fs::write(&path, text).unwrap();
    let spec = WorkloadSpec::load(path.to_str().unwrap()).unwrap();
    let requests = spec.generate(1, Limit::Requests(4));
    assert_eq!(requests.iter().map(|r| r.click).collect::<Vec<_>>(), vec![0, 0, 1, 1]);
    assert_eq!(requests[2].send_at_ms, 1500.0);
    assert!(requests.iter().all(|r| (1000..=2000).contains(&r.response_bytes)));

    std::fs::write(&path, text.replace("[[2, 1.0]]", "[[2, 1.0]")).unwrap();
    let (source, line, _, _) = invalid(WorkloadSpec::from_path(&path));
    assert_eq!(source, path.display().to_string());
    // The unclosed array on line 4 is noticed where the next key starts.
    assert!((4..=5).contains(&line), "line {line}");
    std::fs::write(&path, text.replace("[2000, 1.0]", "[2000, \"all\"]")).unwrap();
    let (_, line, field, _) = invalid(WorkloadSpec::from_path(&path));
    assert_eq!((line, field.as_str()), (6, "clicks.response_bytes"));
    std::fs::remove_dir_all(&dir).unwrap();

    let missing = WorkloadSpec::from_path(dir.join("absent.toml")).unwrap_err();
    assert!(matches!(missing, WorkloadError::Read { .. }));
    assert!(missing.to_string().contains("absent.toml"));
}

#[test]
fn cdf_statistics_of_the_shipped_tables_match_their_comments() {
    let app = builtin("app");
    let clicks = app.clicks.as_ref().unwrap();
    let response: &Cdf = clicks.response_bytes.as_ref().unwrap();
    assert!((response.probability_at_most(10_000.0) - 0.70).abs() < 1e-12);
    assert!((response.mean() - 31_752.5).abs() < 1.0);
    let feed = builtin("feed");
    assert!((feed.clicks.as_ref().unwrap().requests_per_click.mean() - 13.5).abs() < 1e-9);
    let page = builtin("page");
    let page = page.page.as_ref().unwrap();
    assert!((page.files_per_page.mean() - 36.05).abs() < 0.01);
    assert!((page.css.size_bytes.mean() - 40_000.0 / 2.28).abs() < 1.0);
    assert!((page.js.size_bytes.mean() - 180_000.0 / 5.66).abs() < 1.0);
    assert!((page.image.size_bytes.mean() - 720_000.0 / 24.58).abs() < 1.0);
}

#[test]
fn a_spec_built_in_code_is_validated_too() {
    let mut spec = WorkloadSpec::bulk(10);
    spec.bulk = None;
    let error = spec.validate().unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("workload `bulk`, field `name`: a workload needs one of"),
        "{error}"
    );
    assert!(
        spec.generate(1, Limit::Requests(5)).is_empty(),
        "a spec without a pattern yields no requests"
    );
    spec.bulk = Some(gearbox_workload::BulkSpec {
        size_bytes: 0,
        request_bytes: 1,
    });
    assert!(spec.validate().unwrap_err().to_string().contains("bulk.size_bytes"));
}
