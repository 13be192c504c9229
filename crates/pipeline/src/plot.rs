//! `recall_at_k.svg`: Recall@k and NDCG@k for k = 1..N, one line per stage
//! and measure, drawn with plotters' SVG backend; the curves themselves, which
//! report.html draws too.

use anyhow::Result;
use eval::Qrels;
use eval::metrics::{Metric, Options, evaluate};
use plotters::prelude::*;

use crate::ranking::Stage;

/// Recall@k and NDCG@k for k = 1..=depth, per stage.
pub(crate) struct Curve {
    pub(crate) stage: String,
    pub(crate) recall: Vec<f64>,
    pub(crate) ndcg: Vec<f64>,
}

/// Each stage's Recall@k and NDCG@k for k = 1..=depth.
pub(crate) fn curves(qrels: &Qrels, stages: &[Stage], depth: usize) -> Result<Vec<Curve>> {
    let ks: Vec<usize> = (1..=depth.max(1)).collect();
    let options = Options::default().with_cutoffs(&ks)?;
    Ok(stages
        .iter()
        .map(|stage| {
            let e = evaluate(qrels, &stage.run, &options);
            Curve {
                stage: stage.name.clone(),
                recall: ks
                    .iter()
                    .map(|&k| e.mean_of(Metric::Recall(k)).unwrap_or(0.0))
                    .collect(),
                ndcg: ks
                    .iter()
                    .map(|&k| e.mean_of(Metric::Ndcg(k)).unwrap_or(0.0))
                    .collect(),
            }
        })
        .collect())
}

/// The plot as SVG text.
pub(crate) fn svg(curves: &[Curve], depth: usize) -> String {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (720, 440)).into_drawing_area();
        // Drawing into a string cannot fail for I/O reasons; a failure would
        // only leave the plot incomplete, which the caller does not depend on.
        let _ = draw(&root, curves, depth);
        let _ = root.present();
    }
    text
}

fn draw(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    curves: &[Curve],
    depth: usize,
) -> Result<(), String> {
    let text = |e: DrawingAreaErrorKind<std::io::Error>| e.to_string();
    root.fill(&WHITE).map_err(text)?;
    let depth = depth.max(2);
    let mut chart = ChartBuilder::on(root)
        .caption("Recall@k and NDCG@k by stage", ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(1usize..depth, 0.0f64..1.0)
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc("k")
        .y_desc("mean over queries")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(text)?;
    let palette = [BLUE, RED, GREEN, MAGENTA];
    for (i, curve) in curves.iter().enumerate() {
        let color = palette[i % palette.len()];
        let recall = curve.recall.iter().enumerate().map(|(k, v)| (k + 1, *v));
        chart
            .draw_series(LineSeries::new(recall, color.stroke_width(2)))
            .map_err(text)?
            .label(format!("{} Recall@k", curve.stage))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        let ndcg = curve.ndcg.iter().enumerate().map(|(k, v)| (k + 1, *v));
        let dashed = color.mix(0.55).stroke_width(2);
        chart
            .draw_series(LineSeries::new(ndcg, dashed))
            .map_err(text)?
            .label(format!("{} NDCG@k", curve.stage))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], dashed));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(text)?;
    Ok(())
}

/// One bar of the leaderboard chart: a first stage's NDCG@10, or a
/// reranker's change drawn on top of it.
#[derive(Debug, Clone)]
pub(crate) struct Bar {
    pub(crate) label: String,
    /// The first stage's NDCG@10.
    pub(crate) base: f64,
    /// A reranker's change on it (`None` for the first stage itself).
    pub(crate) gain: Option<f64>,
}

/// `leaderboard.svg`: NDCG@10 per first stage, each reranker's bar beside
/// it with its gain (green) or loss (red) drawn on the first stage's level.
pub(crate) fn leaderboard_svg(bars: &[Bar]) -> String {
    let mut text = String::new();
    {
        let width = (160 + 44 * bars.len() as u32).max(480);
        let root = SVGBackend::with_string(&mut text, (width, 460)).into_drawing_area();
        let _ = draw_bars(&root, bars);
        let _ = root.present();
    }
    text
}

fn draw_bars(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    bars: &[Bar],
) -> Result<(), String> {
    let text = |e: DrawingAreaErrorKind<std::io::Error>| e.to_string();
    root.fill(&WHITE).map_err(text)?;
    let n = bars.len().max(1);
    let top = bars
        .iter()
        .map(|b| b.base.max(b.base + b.gain.unwrap_or(0.0)))
        .fold(0.0f64, f64::max)
        .clamp(0.1, 1.0);
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let mut chart = ChartBuilder::on(root)
        .caption(
            "NDCG@10 per first stage; rerankers' change on top",
            ("sans-serif", 18),
        )
        .margin(16)
        .x_label_area_size(180)
        .y_label_area_size(48)
        .build_cartesian_2d((0..n).into_segmented(), 0.0f64..top * 1.05)
        .map_err(text)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE.mix(0.0))
        .x_labels(n)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_label_style(
            ("sans-serif", 11)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .y_desc("NDCG@10")
        .draw()
        .map_err(text)?;
    let grey = RGBColor(120, 144, 180);
    let gain_color = RGBColor(46, 160, 67);
    let loss_color = RGBColor(207, 34, 46);
    for (i, bar) in bars.iter().enumerate() {
        let (x0, x1) = (SegmentValue::Exact(i), SegmentValue::Exact(i + 1));
        let (low, high, color) = match bar.gain {
            None => (0.0, bar.base, grey.filled()),
            Some(g) if g >= 0.0 => (bar.base, bar.base + g, gain_color.filled()),
            Some(g) => (bar.base + g, bar.base, loss_color.filled()),
        };
        // Bars apart: a margin on each side of the segment.
        let rect = |from, to, low, high, style| {
            let mut r = Rectangle::new([(from, low), (to, high)], style);
            r.set_margin(0, 0, 6, 6);
            r
        };
        if bar.gain.is_some() {
            // The first stage's level, faint, under the change.
            let faint = grey.mix(0.3).filled();
            chart
                .draw_series([rect(x0.clone(), x1.clone(), 0.0, low, faint)])
                .map_err(text)?;
        }
        chart
            .draw_series([rect(x0, x1, low, high, color)])
            .map_err(text)?;
    }
    Ok(())
}
