"""Run by test_spark_connect.py in its own interpreter (a Spark Connect session
cannot share a process with the classic session of the other Spark tests):
encode, fit and transform, then the command, over a local Spark Connect server, results as .npy."""
import json
import sys

import numpy as np

import bertflow.spark as bs
from bertflow.spark.__main__ import main as command


def main(parquet, model, out):
    spark = bs.local_session("local[2]", app_name="bertflow-connect", connect=True)
    try:
        df = spark.read.parquet(parquet)
        enc = bs.encode(df, "text", model=model, pooling="last-avg").cache()
        w = bs.fit(enc, "embedding", "whiten:k=64")
        z = bs.transform(enc, "embedding", w, output_col="z")
        t = z.select("id", "embedding", "z").toArrow()
        order = np.argsort(np.asarray(t.column("id").to_numpy()), kind="stable")
        np.save(f"{out}/ids.npy", np.asarray(t.column("id").to_numpy())[order])
        np.save(f"{out}/x.npy", np.asarray(t.column("embedding").to_pylist(), np.float32)[order])
        np.save(f"{out}/z.npy", np.asarray(t.column("z").to_pylist(), np.float32)[order])
        w.save(f"{out}/w.safetensors")
        # The command on the same Connect session (it takes the active one).
        command(["--input", parquet, "--output", f"{out}/command.parquet", "--model", model,
                 "--pooling", "last-avg", "--calibrate", "whiten:k=64"])
        info = {"session": type(spark).__module__, "rows": z.count()}
        print(json.dumps(info))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
