// Run inside a sandbox by test_browser.py: Playwright (playwright-core, no bundled browser)
// drives Debian's chromium, as an agent's script would, through the gateway to a page of the
// local site. Prints one JSON line: the status, what the page's JS evaluated, the screenshot.
// Usage: node playwright_page.js URL SCREENSHOT.png
const { chromium } = require('playwright-core');

(async () => {
  const [url, shot] = process.argv.slice(2);
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium' });
  try {
    const page = await browser.newPage({ viewport: { width: 320, height: 240 } });
    const resp = await page.goto(url, { waitUntil: 'load' });
    const seen = await page.evaluate(() => ({
      title: document.title,
      background: getComputedStyle(document.body).backgroundColor,
      img: document.getElementById('img').textContent,
      script: document.getElementById('script').textContent,
    }));
    await page.screenshot({ path: shot });
    console.log(JSON.stringify({ status: resp.status(), ...seen }));
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
