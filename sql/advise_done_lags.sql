-- advise_done_lags: (`effect-recon advise`) for one rule, from the order's earliest change
-- to the due status $due_status to its first SUCCEEDED receipt of $effect, both by the
-- cut, over the orders where the effect was done at or after it became due, in
-- microseconds. $cut: Int64 microseconds; $due_status, $effect: Utf8.
WITH due AS (
    SELECT order_id, min(CAST(changed_at AS BIGINT)) AS due_at
    FROM status_history
    WHERE status = $due_status AND CAST(changed_at AS BIGINT) <= $cut
    GROUP BY order_id
),
ok AS (
    SELECT order_id, min(CAST(created_at AS BIGINT)) AS first_ok
    FROM receipts
    WHERE effect = $effect AND status = 'SUCCEEDED' AND CAST(created_at AS BIGINT) <= $cut
    GROUP BY order_id
)
SELECT ok.first_ok - due.due_at AS lag
FROM due JOIN ok ON ok.order_id = due.order_id
WHERE ok.first_ok >= due.due_at
