import numpy as np
import pytest

from shared.errors import BatchShapeError
from shared.runtime.batching.rows import split_rows, stack_rows


def test_stack_then_split_round_trips() -> None:
    rows = [np.array([i, i + 1], dtype=np.float32) for i in range(3)]
    matrix = stack_rows(rows)
    assert matrix.shape == (3, 2) and matrix.dtype == np.float32
    assert [list(r) for r in split_rows(matrix, 3)] == [[0, 1], [1, 2], [2, 3]]


def test_output_rows_must_equal_input_rows() -> None:
    with pytest.raises(BatchShapeError):
        split_rows(np.zeros((2, 2)), 3)
    with pytest.raises(BatchShapeError):
        split_rows(np.float64(1.0).reshape(()), 1)


def test_empty_batch_is_refused() -> None:
    with pytest.raises(BatchShapeError):
        stack_rows([])


def test_unequal_rows_are_a_shape_error() -> None:
    with pytest.raises(BatchShapeError):
        stack_rows([np.zeros(2, dtype=np.float32), np.zeros(3, dtype=np.float32)])
