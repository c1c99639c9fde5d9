//! `report.md`, the SVG figures and the files of an evaluation.

use super::fabrics::Family;
use super::run::{
    EvalResults, EvalTiming, Grid, Point, ScoreRow, Telemetry, EPOCHS_LOG2_NS, THRESHOLDS_PERCENT,
};
use super::svg::{bar_chart, figure, line_chart, Series};
use super::traces::AnomalyClass;
use super::{EvalError, Score};
use crate::PollingMode;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn ratio(value: Option<f64>) -> String {
    value.map_or("—".to_string(), |v| format!("{v:.2}"))
}

/// `P / R (reports)`.
fn pr(score: &Score) -> String {
    if score.traces == 0 {
        return "—".into();
    }
    format!(
        "{} / {} ({})",
        ratio(score.precision),
        ratio(score.recall),
        score.reports
    )
}

fn class_name(class: Option<AnomalyClass>) -> String {
    class.map_or("all classes".to_string(), |c| c.name().to_string())
}

fn score_at(
    results: &EvalResults,
    class: Option<AnomalyClass>,
    point: Point,
    mode: PollingMode,
) -> Option<&ScoreRow> {
    results
        .summary
        .scores
        .iter()
        .find(|r| r.class == class && r.point == point && r.mode == mode)
}

fn epoch_points(results: &EvalResults) -> Vec<Point> {
    let fixed = results.fixed_point;
    EPOCHS_LOG2_NS
        .iter()
        .map(|e| Point {
            epoch_log2_ns: *e,
            threshold_percent: fixed.threshold_percent,
        })
        .filter(|p| results.points.contains(p))
        .collect()
}

fn threshold_points(results: &EvalResults) -> Vec<Point> {
    let fixed = results.fixed_point;
    THRESHOLDS_PERCENT
        .iter()
        .map(|t| Point {
            epoch_log2_ns: fixed.epoch_log2_ns,
            threshold_percent: *t,
        })
        .filter(|p| results.points.contains(p))
        .collect()
}

fn class_rows(results: &EvalResults) -> Vec<Option<AnomalyClass>> {
    results
        .classes
        .iter()
        .map(|c| Some(*c))
        .chain(std::iter::once(None))
        .collect()
}

fn sweep_table(
    out: &mut String,
    results: &EvalResults,
    points: &[Point],
    header: &dyn Fn(Point) -> String,
) {
    let _ = write!(out, "| class |");
    for p in points {
        let _ = write!(out, " {} |", header(*p));
    }
    let _ = write!(out, "\n|---|");
    for _ in points {
        let _ = write!(out, "---|");
    }
    out.push('\n');
    for class in class_rows(results) {
        let _ = write!(out, "| {} |", class_name(class));
        for p in points {
            let cell = score_at(results, class, *p, PollingMode::Hawkeye)
                .map(|r| pr(&r.score))
                .unwrap_or_else(|| "—".into());
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
}

/// The Markdown report (`timing` adds the wall-time section).
pub fn markdown(results: &EvalResults, timing: Option<&EvalTiming>, command: &str) -> String {
    let mut out = String::new();
    let fixed = results.fixed_point;
    let _ = writeln!(out, "# HAWKEYE evaluation — `hawkmesh eval`\n");
    let _ = writeln!(
        out,
        "Reproduce with `{command}`. Metric definitions: [docs/eval.md](../eval.md) (precision = correct reports / reports, recall = traces with a correct report / traces; a report is correct only with the right anomaly type *and* root cause). Cells read `precision / recall (reports)`; `—` = nothing to measure.\n"
    );
    let _ = writeln!(out, "## Configuration\n");
    let _ = writeln!(out, "| setting | value |\n|---|---|");
    let _ = writeln!(out, "| master seed | {} |", results.master_seed);
    let _ = writeln!(out, "| traces per class | {} |", results.traces_per_class);
    let _ = writeln!(
        out,
        "| classes | {} |",
        results
            .classes
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let grid = match results.grid {
        Grid::Sweep => "sweep (epochs at the fixed threshold, thresholds at the fixed epoch)",
        Grid::Full => "full (every epoch × every threshold)",
        Grid::Fixed => "fixed point only",
    };
    let _ = writeln!(out, "| grid | {grid} |");
    let _ = writeln!(
        out,
        "| points | {} |",
        results
            .points
            .iter()
            .map(|p| p.label())
            .collect::<Vec<_>>()
            .join("; ")
    );
    let _ = writeln!(
        out,
        "| fixed point (baselines, ablations, overhead) | {} |",
        fixed.label()
    );
    let _ = writeln!(
        out,
        "| fabric families | {} |",
        results
            .families
            .iter()
            .map(|f| format!("{} ({})", f.name(), f.title()))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if results.families.contains(&Family::K4) {
        let _ = writeln!(out, "| k4 | K=4 fat-tree, 20 switches, 16 hosts, 100 Gbit/s, 2 µs links, WebSearch background at 20–50 % |");
    }
    if results.families.iter().any(|f| *f != Family::K4) {
        let _ = writeln!(out, "| drawn families | per trace: host links 25–400 Gbit/s, fabric links 1–4× the host speed, oversubscription 1:1–4:1, 1–2 µs links, ECN Kmin 1–4 KB per Gbit/s (Kmax 4×, Pmax 5–20 %), PFC threshold shift 2–3, shared buffer 1.5–4 MiB beyond headroom (PFC classes) or 16–48 MiB (contention), WebSearch background on every rail loading the uplinks at 10–50 % (host load = that / oversubscription) |");
    }
    for (key, value) in &results.loop_settings {
        let _ = writeln!(out, "| {key} | {value} |");
    }

    let _ = writeln!(out, "\n## Traces\n");
    let _ = writeln!(
        out,
        "A trace is drawn again (up to 8 attempts) until a plain simulation shows its anomaly; runs where the loop's own simulation does not show it are not judged.\n"
    );
    let _ = writeln!(
        out,
        "| class | traces | materialised | mean attempts | mean load | runs judged | runs not materialised |\n|---|---|---|---|---|---|---|"
    );
    for class in &results.classes {
        let traces: Vec<_> = results
            .traces
            .iter()
            .filter(|t| t.spec.class == *class)
            .collect();
        let realized = traces.iter().filter(|t| t.realized).count();
        let attempts: usize = traces.iter().map(|t| t.attempts.len()).sum();
        let load: f64 = traces.iter().map(|t| t.spec.load).sum();
        let runs: Vec<_> = results.runs.iter().filter(|r| r.class == *class).collect();
        let judged = runs.iter().filter(|r| r.realized).count();
        let n = traces.len().max(1) as f64;
        let _ = writeln!(
            out,
            "| {} | {} | {realized} | {:.1} | {:.2} | {judged} | {} |",
            class.name(),
            traces.len(),
            attempts as f64 / n,
            load / n,
            runs.len() - judged
        );
    }

    if results.families.len() > 1 || results.families.first() != Some(&Family::K4) {
        let _ = writeln!(
            out,
            "\n## Per fabric family at the fixed point ({})\n",
            fixed.label()
        );
        let _ = writeln!(
            out,
            "HAWKEYE's precision / recall (reports) per family and class; the last columns are every class together and the mean coverage of the causally relevant switches.\n"
        );
        let mut header = String::from("| family |");
        let mut rule = String::from("|---|");
        for class in &results.classes {
            let _ = write!(header, " {} |", class.name());
            rule.push_str("---|");
        }
        let _ = writeln!(out, "{header} all classes | coverage |\n{rule}---|---|");
        for family in &results.families {
            let row = |class: Option<AnomalyClass>| {
                results.summary.families.iter().find(|r| {
                    r.family == *family && r.class == class && r.mode == PollingMode::Hawkeye
                })
            };
            let cells: Vec<String> = results
                .classes
                .iter()
                .map(|c| row(Some(*c)).map_or("—".into(), |r| pr(&r.score)))
                .collect();
            let all = row(None);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                family.name(),
                cells.join(" | "),
                all.map_or("—".into(), |r| pr(&r.score)),
                all.map_or("—".into(), |r| format!("{:.2}", r.coverage))
            );
        }
        let _ = writeln!(out, "\n| family | trace | fabric |\n|---|---|---|");
        for trace in results
            .traces
            .iter()
            .filter(|t| t.spec.fabric.family != Family::K4)
        {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                trace.spec.fabric.family.name(),
                trace.spec.id,
                trace.spec.fabric.describe()
            );
        }
    }

    let epochs = epoch_points(results);
    if !epochs.is_empty() {
        let _ = writeln!(
            out,
            "\n## Precision and recall vs epoch size (HAWKEYE Fig. 7), threshold {} %\n",
            fixed.threshold_percent
        );
        sweep_table(&mut out, results, &epochs, &|p| {
            format!("{:.0} µs", p.epoch_us())
        });
        let _ = writeln!(
            out,
            "\n![precision and recall vs epoch size](fig7-epoch.svg)"
        );
    }
    let thresholds = threshold_points(results);
    if !thresholds.is_empty() {
        let _ = writeln!(
            out,
            "\n## Precision and recall vs RTT threshold (HAWKEYE Fig. 7), epoch {:.0} µs\n",
            fixed.epoch_us()
        );
        sweep_table(&mut out, results, &thresholds, &|p| {
            format!("{} %", p.threshold_percent)
        });
        let _ = writeln!(
            out,
            "\n![precision and recall vs threshold](fig7-threshold.svg)"
        );
    }
    if results.grid == Grid::Full {
        let _ = writeln!(out, "\n## Full grid (HAWKEYE)\n");
        for class in class_rows(results) {
            let _ = writeln!(out, "### {}\n", class_name(class));
            let _ = write!(out, "| epoch \\ threshold |");
            for t in THRESHOLDS_PERCENT {
                let _ = write!(out, " {t} % |");
            }
            let _ = writeln!(out, "\n|---|---|---|---|---|");
            for e in EPOCHS_LOG2_NS {
                let point = |t| Point {
                    epoch_log2_ns: e,
                    threshold_percent: t,
                };
                let _ = write!(out, "| {:.0} µs |", point(0).epoch_us());
                for t in THRESHOLDS_PERCENT {
                    let cell = score_at(results, class, point(t), PollingMode::Hawkeye)
                        .map(|r| pr(&r.score))
                        .unwrap_or_else(|| "—".into());
                    let _ = write!(out, " {cell} |");
                }
                out.push('\n');
            }
            out.push('\n');
        }
    }

    let _ = writeln!(out, "\n## Best parameters per class and method\n");
    let _ = writeln!(
        out,
        "Highest F1, then precision, then recall; ties go to the smaller epoch and lower threshold.\n"
    );
    let _ = writeln!(
        out,
        "| class | method | point | precision | recall | F1 | reports |\n|---|---|---|---|---|---|---|"
    );
    for row in &results.summary.best {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.class.name(),
            row.mode.as_str(),
            row.point.label(),
            ratio(row.score.precision),
            ratio(row.score.recall),
            ratio(row.score.f1),
            row.score.reports
        );
    }

    let _ = writeln!(
        out,
        "\n## Baselines (HAWKEYE Fig. 8) at the fixed point ({})\n",
        fixed.label()
    );
    let _ = writeln!(
        out,
        "Full polling collects every switch for every polling event; victim-only collects only the switches on the victim's path (no PFC tracing). All three run on the same simulation.\n"
    );
    let _ = writeln!(
        out,
        "| class | hawkeye | full polling | victim only |\n|---|---|---|---|"
    );
    for class in class_rows(results) {
        let cells: Vec<String> = PollingMode::ALL
            .iter()
            .map(|m| {
                score_at(results, class, fixed, *m)
                    .map(|r| pr(&r.score))
                    .unwrap_or_else(|| "—".into())
            })
            .collect();
        let _ = writeln!(out, "| {} | {} |", class_name(class), cells.join(" | "));
    }
    let _ = writeln!(out, "\n![baselines](fig8-baselines.svg)");

    let _ = writeln!(
        out,
        "\n## Telemetry ablations (HAWKEYE Fig. 10) at the fixed point\n"
    );
    let _ = writeln!(
        out,
        "HAWKEYE's attributed incidents re-diagnosed from the same reports: all telemetry, port records and causality meters only (flow records dropped), flow records only (port records and meters dropped).\n"
    );
    let _ = writeln!(
        out,
        "| class | full | port only | flow only |\n|---|---|---|---|"
    );
    for class in class_rows(results) {
        let cells: Vec<String> = Telemetry::ALL
            .iter()
            .map(|t| {
                results
                    .summary
                    .ablations
                    .iter()
                    .find(|a| a.class == class && a.telemetry == *t)
                    .map(|a| pr(&a.score))
                    .unwrap_or_else(|| "—".into())
            })
            .collect();
        let _ = writeln!(out, "| {} | {} |", class_name(class), cells.join(" | "));
    }
    let _ = writeln!(out, "\n![ablations](fig10-ablation.svg)");

    let _ = writeln!(
        out,
        "\n## Overhead (HAWKEYE Figs. 9 and 11) at the fixed point\n"
    );
    let _ = writeln!(
        out,
        "Per run: polling packets sent by hosts, polling copies at switch CPUs, full polling's controller requests, collections, telemetry bytes. Per attributed incident: telemetry bytes, switches collected, causally relevant switches (the victim's path and the switches on the PFC spreading paths from the victim's paused ports back to the origin, over the triggering RTT sample's window, with the whole loop when that chain enters a deadlock's closed loop) and the share of them collected (coverage).\n"
    );
    let _ = writeln!(
        out,
        "| class | method | runs | polling pkts/run | copies/run | requests/run | collections/run | KB/run | incidents | KB/incident | switches/incident | causal/incident | coverage |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for row in &results.summary.overhead {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:.1} | {:.2} | {:.2} | {:.3} |",
            class_name(row.class),
            row.mode.as_str(),
            row.runs,
            row.polling_packets,
            row.polling_copies,
            row.controller_requests,
            row.collections,
            row.telemetry_bytes / 1000.0,
            row.incidents,
            row.bytes_per_incident / 1000.0,
            row.switches_collected,
            row.causal_switches,
            row.coverage
        );
    }
    let _ = writeln!(
        out,
        "\n![overhead](fig9-overhead.svg)\n\n![coverage](fig11-coverage.svg)"
    );

    let _ = writeln!(
        out,
        "\n## How the attributed incidents were judged (fixed point)\n"
    );
    let _ = writeln!(
        out,
        "| class | method | correct | wrong root cause | wrong type | silent | undiagnosed | most frequent wrong claims (ports stripped) |\n|---|---|---|---|---|---|---|---|"
    );
    for row in &results.summary.verdicts {
        let count = |k: &str| row.counts.get(k).copied().unwrap_or(0);
        let wrong: Vec<String> = row
            .wrong_claims
            .iter()
            .map(|(claim, n)| format!("`{claim}` ×{n}"))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            row.class.name(),
            row.mode.as_str(),
            count("correct"),
            count("wrong_root_cause"),
            count("wrong_type"),
            count("silent"),
            count("undiagnosed"),
            if wrong.is_empty() {
                "—".to_string()
            } else {
                wrong.join(", ")
            }
        );
    }
    if let Some(timing) = timing {
        let runs: Vec<f64> = timing
            .traces
            .iter()
            .flat_map(|t| t.runs.iter().map(|(_, s)| *s))
            .collect();
        let precheck: f64 = timing.traces.iter().map(|t| t.precheck_s).sum();
        let _ = writeln!(out, "\n## Wall time (not deterministic; `timing.json`)\n");
        let _ = writeln!(
            out,
            "{:.0} s in total on this machine; {} loop runs (each runs the three methods on one simulation), {:.1} s per run on average (max {:.1} s); drawing traces (plain simulations) {:.1} s.",
            timing.total_s,
            runs.len(),
            runs.iter().sum::<f64>() / runs.len().max(1) as f64,
            runs.iter().copied().fold(0.0, f64::max),
            precheck
        );
    }
    out
}

fn mode_label(mode: PollingMode) -> String {
    match mode {
        PollingMode::Hawkeye => "HAWKEYE".into(),
        PollingMode::FullPolling => "full polling".into(),
        PollingMode::VictimOnly => "victim only".into(),
    }
}

/// The figures: (file name, SVG).
pub fn charts(results: &EvalResults) -> Vec<(String, String)> {
    let fixed = results.fixed_point;
    let classes = &results.classes;
    let class_labels: Vec<String> = classes.iter().map(|c| c.name().to_string()).collect();
    let mut figures = Vec::new();
    let sweep = |points: &[Point], x_axis: &str, labels: Vec<String>, title: &str| {
        let series_of = |pick: &dyn Fn(&Score) -> Option<f64>| -> Vec<Series> {
            classes
                .iter()
                .map(|c| Series {
                    name: c.name().to_string(),
                    values: points
                        .iter()
                        .map(|p| {
                            score_at(results, Some(*c), *p, PollingMode::Hawkeye)
                                .and_then(|r| pick(&r.score))
                        })
                        .collect(),
                })
                .collect()
        };
        figure(
            title,
            &[
                line_chart(
                    "precision",
                    x_axis,
                    &labels,
                    "precision",
                    Some(1.0),
                    &series_of(&|s| s.precision),
                ),
                line_chart(
                    "recall",
                    x_axis,
                    &labels,
                    "recall",
                    Some(1.0),
                    &series_of(&|s| s.recall),
                ),
            ],
        )
    };
    let epochs = epoch_points(results);
    figures.push((
        "fig7-epoch.svg".to_string(),
        sweep(
            &epochs,
            "epoch size",
            epochs
                .iter()
                .map(|p| format!("{:.0} µs", p.epoch_us()))
                .collect(),
            &format!(
                "HAWKEYE precision and recall vs epoch size (threshold {} %)",
                fixed.threshold_percent
            ),
        ),
    ));
    let thresholds = threshold_points(results);
    figures.push((
        "fig7-threshold.svg".to_string(),
        sweep(
            &thresholds,
            "RTT threshold",
            thresholds
                .iter()
                .map(|p| format!("{} %", p.threshold_percent))
                .collect(),
            &format!(
                "HAWKEYE precision and recall vs RTT threshold (epoch {:.0} µs)",
                fixed.epoch_us()
            ),
        ),
    ));
    let by_mode = |pick: &dyn Fn(&Score) -> Option<f64>| -> Vec<Series> {
        PollingMode::ALL
            .iter()
            .map(|m| Series {
                name: mode_label(*m),
                values: classes
                    .iter()
                    .map(|c| score_at(results, Some(*c), fixed, *m).and_then(|r| pick(&r.score)))
                    .collect(),
            })
            .collect()
    };
    figures.push((
        "fig8-baselines.svg".to_string(),
        figure(
            &format!("precision and recall vs baselines ({})", fixed.label()),
            &[
                bar_chart(
                    "precision",
                    &class_labels,
                    "precision",
                    Some(1.0),
                    &by_mode(&|s| s.precision),
                ),
                bar_chart(
                    "recall",
                    &class_labels,
                    "recall",
                    Some(1.0),
                    &by_mode(&|s| s.recall),
                ),
            ],
        ),
    ));
    let mut groups = class_labels.clone();
    groups.push("all".into());
    let group_classes: Vec<Option<AnomalyClass>> = class_rows(results);
    let ablation = |pick: &dyn Fn(&Score) -> Option<f64>| -> Vec<Series> {
        Telemetry::ALL
            .iter()
            .map(|t| Series {
                name: t.as_str().replace('_', " "),
                values: group_classes
                    .iter()
                    .map(|c| {
                        results
                            .summary
                            .ablations
                            .iter()
                            .find(|a| a.class == *c && a.telemetry == *t)
                            .and_then(|a| pick(&a.score))
                    })
                    .collect(),
            })
            .collect()
    };
    figures.push((
        "fig10-ablation.svg".to_string(),
        figure(
            "diagnosis with port-level-only and flow-level-only telemetry",
            &[
                bar_chart(
                    "precision",
                    &groups,
                    "precision",
                    Some(1.0),
                    &ablation(&|s| s.precision),
                ),
                bar_chart(
                    "recall",
                    &groups,
                    "recall",
                    Some(1.0),
                    &ablation(&|s| s.recall),
                ),
            ],
        ),
    ));
    let overhead = |pick: &dyn Fn(&super::run::OverheadRow) -> f64| -> Vec<Series> {
        PollingMode::ALL
            .iter()
            .map(|m| Series {
                name: mode_label(*m),
                values: group_classes
                    .iter()
                    .map(|c| {
                        results
                            .summary
                            .overhead
                            .iter()
                            .find(|o| o.class == *c && o.mode == *m && o.runs > 0)
                            .map(pick)
                    })
                    .collect(),
            })
            .collect()
    };
    figures.push((
        "fig9-overhead.svg".to_string(),
        figure(
            &format!("collection overhead ({})", fixed.label()),
            &[
                bar_chart(
                    "telemetry per attributed incident",
                    &groups,
                    "KB",
                    None,
                    &overhead(&|o| o.bytes_per_incident / 1000.0),
                ),
                bar_chart(
                    "polling messages per run",
                    &groups,
                    "copies at switch CPUs + requests",
                    None,
                    &overhead(&|o| o.polling_copies + o.controller_requests),
                ),
            ],
        ),
    ));
    figures.push((
        "fig11-coverage.svg".to_string(),
        figure(
            &format!("collected switches and causal coverage ({})", fixed.label()),
            &[
                bar_chart(
                    "switches collected per incident",
                    &groups,
                    "switches",
                    None,
                    &overhead(&|o| o.switches_collected),
                ),
                bar_chart(
                    "causal switch coverage",
                    &groups,
                    "collected ∩ causal / causal",
                    Some(1.0),
                    &overhead(&|o| o.coverage),
                ),
            ],
        ),
    ));
    figures
}

/// Writes `results.json`, `timing.json`, `report.md`, the figures and `traces/<id>.toml`
/// into `dir`; returns the files written.
pub fn write_outputs(
    dir: &Path,
    results: &EvalResults,
    timing: &EvalTiming,
    command: &str,
) -> Result<Vec<PathBuf>, EvalError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| EvalError::Io { path, source }
    };
    let traces_dir = dir.join("traces");
    std::fs::create_dir_all(&traces_dir).map_err(io(&traces_dir))?;
    let mut written = Vec::new();
    let mut write = |path: PathBuf, body: &str| -> Result<(), EvalError> {
        std::fs::write(&path, body).map_err(io(&path))?;
        written.push(path);
        Ok(())
    };
    let json = serde_json::to_string_pretty(results).map_err(|e| EvalError::Io {
        path: "results.json".into(),
        source: std::io::Error::other(e),
    })?;
    write(dir.join("results.json"), &format!("{json}\n"))?;
    let json = serde_json::to_string_pretty(timing).map_err(|e| EvalError::Io {
        path: "timing.json".into(),
        source: std::io::Error::other(e),
    })?;
    write(dir.join("timing.json"), &format!("{json}\n"))?;
    write(
        dir.join("report.md"),
        &markdown(results, Some(timing), command),
    )?;
    for (name, svg) in charts(results) {
        write(dir.join(name), &svg)?;
    }
    for trace in &results.traces {
        write(
            traces_dir.join(format!("{}.toml", trace.spec.id)),
            &trace.spec.to_toml(),
        )?;
    }
    Ok(written)
}
