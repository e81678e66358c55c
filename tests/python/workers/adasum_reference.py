"""Horovod's Adasum reference, written here from its definition: adasum(a, b) =
(1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b (a coefficient is 1 for a zero vector),
applied as a tree over ranks (0,1), (2,3), ... then the pairs' results, in float64."""


def adasum_reference(vectors):
    def combine(a, b):
        dot, an, bn = a @ b, a @ a, b @ b
        return ((1 - dot / an * 0.5) if an != 0 else 1.0) * a + \
            ((1 - dot / bn * 0.5) if bn != 0 else 1.0) * b
    level = [v.double() for v in vectors]
    while len(level) > 1:
        level = [combine(level[2 * i], level[2 * i + 1]) for i in range(len(level) // 2)]
    return level[0]
