import collections

from classes import cls, path

P = ("staged_f16.c", "0", "2a00", "00d0=t,0350=n,03b0=t,06f0=n,07e0=t,0ae0=tn,0c50=n,1410=n,14a0=t,2570=n,25b0=n")
L = (
    "2a60=n,2af0=t,3ad0=n,3b30=3b60,43b0=n,4460=t,4590=t,4d40=n,4d70=n,4da0=n,4dd0=n,4e00=n,4e80=t,4f40=t,"
    "5080=t,5100=n,5470=t,5970=t,5ec0=t,6360=t,6670=n"
)
pro = collections.Counter(cls(t) for t in path(*P))
li = collections.Counter(cls(t) for t in path("staged_f16.c", "2a00", "6680", L))
ll = collections.Counter(cls(t) for t in path("staged_f16.c", "2a00", "99999", L.replace("2a60=n", "2a60=t")))
for k in sorted(set(pro) | set(li) | set(ll)):
    print(f"{k:<34} prologue/4 {pro[k] / 4:6.1f}  loop(avg) {(3 * li[k] + ll[k]) / 4:6.1f}")
print("totals", sum(pro.values()) / 4, (3 * sum(li.values()) + sum(ll.values())) / 4)
