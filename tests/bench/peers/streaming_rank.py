"""One rank of MosaicML Streaming in the elastic matrix (Streaming learns its rank from the
environment, so each rank is a process). usage: streaming_rank.py MDS RANK WORLD MB STEPS [STATE]
Prints a pickle: {"steps": [[ids of this rank's micro-batch] per step], "state": state_dict()}.
"""
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import systems  # noqa: E402


def main():
    mds, rank, world, mb, steps = sys.argv[1], *map(int, sys.argv[2:6])
    state_file = sys.argv[6] if len(sys.argv) > 6 else ""
    loader = systems.streaming_loader(mds, rank, world, mb, 0)
    if state_file:
        with open(state_file, "rb") as f:
            loader.load_state_dict(pickle.load(f))
    out = []
    it = iter(loader)
    for _ in range(steps):
        try:
            b = next(it)
        except StopIteration:
            break
        out.append([int(x) for x in b[:, 0]])
    st = loader.state_dict()
    sys.stdout.buffer.write(pickle.dumps({"steps": out, "state": st}))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
