//! Slow group (`scripts/slow-tests.sh`): the playground page and the `bertflow report`
//! HTML opened in headless Chromium (Debian's `chromium` package, or the browser in
//! `$BERTFLOW_CHROMIUM`). Checks that the playground, run by the browser's JavaScript
//! against a real server, fills its similarity table and search results, and that every
//! figure of the report decodes. Without a browser the tests say so and pass (the
//! script installs one when it can).
use crate::common;

use common::{bertflow, ok};
use scraper::{Html, Selector};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn chromium() -> Option<PathBuf> {
    let candidates = std::env::var("BERTFLOW_CHROMIUM")
        .ok()
        .into_iter()
        .chain(["chromium", "chromium-browser", "google-chrome"].map(String::from));
    for c in candidates {
        let ok = Command::new(&c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(PathBuf::from(c));
        }
    }
    eprintln!(
        "SKIPPED: no headless browser found (install Debian's `chromium` package or set \
         BERTFLOW_CHROMIUM); scripts/slow-tests.sh installs it when it can"
    );
    None
}

/// The DOM after the page's scripts ran (network included, up to 60 s of virtual time).
fn dump_dom(browser: &Path, url: &str, profile: &Path) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--allow-file-access-from-files",
            "--virtual-time-budget=60000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", url])
        .output()
        .expect("run the browser");
    assert!(
        out.status.success(),
        "browser failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn select<'a>(doc: &'a Html, css: &str) -> Vec<scraper::ElementRef<'a>> {
    doc.select(&Selector::parse(css).unwrap()).collect()
}

fn text(e: &scraper::ElementRef) -> String {
    e.text().collect::<String>().trim().to_owned()
}

#[test]
#[ignore = "slow group: needs a headless browser"]
fn playground_answers_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    std::fs::write(
        &corpus,
        "A man is playing a guitar.\nA woman is slicing onions.\nTwo dogs run across a field.\n\
         The stock market fell sharply today.\nA chef chops vegetables.\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bertflow"))
        .env("BERTFLOW_TUNE", "0")
        .args(["serve", "--model", &common::model(), "--port", "0"])
        .arg("--corpus")
        .arg(&corpus)
        .args(["--api-key", "browser-test-key"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start serve");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line.split("listening on ").nth(1) {
                let _ = tx.send(addr.trim().to_owned());
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(90))
        .expect("serve listens");
    let url = format!(
        "{base}/?run=1&key=browser-test-key&sentences=A%20man%20plays%20the%20guitar.|\
         Someone%20is%20playing%20music.|A%20woman%20cuts%20an%20onion.&query=a%20person%20with%20a%20guitar"
    );
    let dom = dump_dom(&browser, &url, &dir.path().join("profile"));
    let _ = child.kill();
    let _ = child.wait();
    let doc = Html::parse_document(&dom);
    assert_eq!(
        select(&doc, "body[data-done='1']").len(),
        1,
        "the page did not finish: {dom}"
    );
    assert!(text(&select(&doc, "#info")[0]).contains("corpus 5 sentences (exact)"));
    // The 3 x 3 table: symmetric scores, guitar~music above guitar~onion.
    let rows = select(&doc, "#sim tr");
    assert_eq!(rows.len(), 4, "{dom}");
    // Row r, column c (1-based, as numbered on the page).
    let cell = |r: usize, c: usize| -> f64 {
        let cells: Vec<_> = rows[r].select(&Selector::parse("td.v").unwrap()).collect();
        text(&cells[c - 1]).parse().unwrap()
    };
    assert_eq!(cell(1, 1), 1.0);
    assert_eq!(cell(1, 2), cell(2, 1));
    assert!(
        cell(1, 2) > cell(1, 3) + 0.1,
        "{} vs {}",
        cell(1, 2),
        cell(1, 3)
    );
    // Search: 5 hits, the guitar sentence first.
    let hits = select(&doc, "#hits li .hit");
    assert_eq!(hits.len(), 5, "{dom}");
    assert_eq!(text(&hits[0]), "A man is playing a guitar.");
}

#[test]
#[ignore = "slow group: needs a headless browser and the STS data"]
fn report_figures_load_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let html_path = dir.path().join("report.html");
    ok(&bertflow(
        &[
            "report",
            "--poolings",
            "emb-avg",
            "--kinds",
            "none,whiten",
            "--knn-queries",
            "100",
            "--output",
            html_path.to_str().unwrap(),
        ],
        &dir.path().join("cache"),
    ));
    // A copy of the report with a checker that counts the decoded images once the page
    // has loaded (the report itself has no script).
    let html = std::fs::read_to_string(&html_path).unwrap();
    let checker =
        "<script>window.addEventListener('load', () => { const imgs = [...document.images]; \
        const d = document.createElement('div'); d.id = 'figcheck'; \
        d.dataset.images = imgs.length; \
        d.dataset.decoded = imgs.filter((i) => i.complete && i.naturalWidth > 0).length; \
        document.body.appendChild(d); });</script>";
    let checked = html.replacen("</body>", &format!("{checker}</body>"), 1);
    assert_ne!(checked, html, "the report has no </body>");
    let copy = dir.path().join("checked.html");
    std::fs::write(&copy, checked).unwrap();
    let dom = dump_dom(
        &browser,
        &format!("file://{}", copy.display()),
        &dir.path().join("profile"),
    );
    let doc = Html::parse_document(&dom);
    let check = select(&doc, "#figcheck");
    assert_eq!(check.len(), 1, "the checker did not run");
    let images: usize = check[0].attr("data-images").unwrap().parse().unwrap();
    let decoded: usize = check[0].attr("data-decoded").unwrap().parse().unwrap();
    assert!(images >= 3, "only {images} figures");
    assert_eq!(decoded, images, "{decoded} of {images} figures decoded");
}
