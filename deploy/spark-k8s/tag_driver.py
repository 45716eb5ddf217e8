"""The driver program of a job under the tagger when spark-submit starts the driver itself:
`spark-submit --deploy-mode cluster` on Kubernetes, and the Spark operator's SparkApplication.

spark-submit runs a Python application from a `.py` file with its JVM already up; this file is
`cutover tag` run in that process, so the job's own file then runs under the tagger exactly as
in client mode. Its arguments are those of `cutover tag`:

    spark-submit ... local:///opt/cutover/tag_driver.py --version green -- /jobs/job.py ARGS
"""

import sys

from cutover.cli import main

if __name__ == "__main__":
    sys.exit(main(["tag", *sys.argv[1:]]))
