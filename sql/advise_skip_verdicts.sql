-- advise_skip_verdicts: (`effect-recon advise --run`) the run's skip verdicts counted.
SELECT verdict, count(*) AS n FROM skip_verdicts GROUP BY verdict
