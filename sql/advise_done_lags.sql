-- advise_done_lags: (`effect-recon advise`) for one rule, from the order's earliest change
-- to the due status $due_status to its first receipt of $effect that was done (SUCCEEDED,
-- or REVERSED since: undone later, done all the same), both by the cut, over the orders
-- where the effect was done at or after it became due and not after the order reached one
-- of the rule's void statuses $void_statuses (comma-separated): a grant after a void is an
-- effect to undo (UNREVERSED_EFFECT), not the handler's lag. In microseconds.
-- $cut: Int64 microseconds; $due_status, $effect, $void_statuses: Utf8.
WITH due AS (
    SELECT order_id, min(CAST(changed_at AS BIGINT)) AS due_at
    FROM status_history
    WHERE status = $due_status AND CAST(changed_at AS BIGINT) <= $cut
    GROUP BY order_id
),
voided AS (
    SELECT order_id, min(CAST(changed_at AS BIGINT)) AS void_at
    FROM status_history
    WHERE array_has(string_to_array($void_statuses, ','), status)
      AND CAST(changed_at AS BIGINT) <= $cut
    GROUP BY order_id
),
done AS (
    SELECT order_id, min(CAST(created_at AS BIGINT)) AS first_done
    FROM receipts
    WHERE effect = $effect AND status IN ('SUCCEEDED', 'REVERSED')
      AND CAST(created_at AS BIGINT) <= $cut
    GROUP BY order_id
)
SELECT done.first_done - due.due_at AS lag
FROM due
JOIN done ON done.order_id = due.order_id
LEFT JOIN voided ON voided.order_id = due.order_id
WHERE done.first_done >= due.due_at
  AND (voided.void_at IS NULL OR done.first_done <= voided.void_at)
